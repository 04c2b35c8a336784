"""``ovstream rpc``: assemble, compact and the agent tools over HTTP."""
