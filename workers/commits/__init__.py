"""``ovstream worker``: the RQ commit and phase-2 poll jobs, and the process that runs them."""
