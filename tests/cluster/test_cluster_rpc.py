"""Assemble, compact and the tools on Redis Cluster (the store there, the commit queue beside)."""

from tests.rpc.test_assemble import *  # noqa: F403
from tests.rpc.test_assemble_turns import *  # noqa: F403
from tests.rpc.test_compact import *  # noqa: F403
from tests.rpc.test_tools import *  # noqa: F403
