"""Capture on Redis Cluster: order, crashes at every step, takeovers, snapshots, commits."""

from tests.capture.test_capture_backlog import *  # noqa: F403
from tests.capture.test_capture_commits import *  # noqa: F403
from tests.capture.test_capture_crash import *  # noqa: F403
from tests.capture.test_capture_dedupe import *  # noqa: F403
from tests.capture.test_capture_failures import *  # noqa: F403
from tests.capture.test_capture_hostile import *  # noqa: F403
from tests.capture.test_capture_order import *  # noqa: F403
from tests.capture.test_capture_snapshot_behind import *  # noqa: F403
from tests.capture.test_capture_snapshots import *  # noqa: F403
from tests.capture.test_capture_takeover import *  # noqa: F403
from tests.capture.test_commit_sweep import *  # noqa: F403
from tests.capture.test_commits_side_by_side import *  # noqa: F403
from tests.capture.test_deployment import *  # noqa: F403
from tests.capture.test_outcome_announce import *  # noqa: F403
from tests.capture.test_reshard import *  # noqa: F403
from tests.capture.test_strays import *  # noqa: F403
