"""``python -m workers.cli``: the ``ovstream`` command without its console script."""

import sys

from workers.cli import main

sys.exit(main())
