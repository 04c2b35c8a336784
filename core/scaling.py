"""How many capture processes and commit workers a deployment's backlog asks for (pure): what an autoscaler
reads (``GET /v1/scaling``, KEDA's ``metrics-api`` trigger in deploy/k8s/keda.yaml).

A capture process owns whole streams, one consumer a stream at a time, so replicas past
the number of streams being read (the current generation's and, during a reshard, the one
draining) only wait: the answer is capped there, and follows ``ovstream reshard`` without
any change to the autoscaler. Never below one: capture also settles interrupted writes and
refreshes snapshots.
"""

from __future__ import annotations

import math

CAPTURE_LAG_PER_REPLICA = 200
"""Turn events not yet applied that one more capture process is worth (a round reads
``captureBatch`` x ``captureReadsPerRound`` = 400 at most)."""


def capture_replicas(backlog: int, streams: int, *, per_replica: int = CAPTURE_LAG_PER_REPLICA) -> int:
    """Capture processes for ``backlog`` unapplied events over ``streams`` streams:
    one per ``per_replica`` events, at least 1, at most ``streams``."""
    wanted = math.ceil(max(backlog, 0) / max(per_replica, 1))
    return max(1, min(max(streams, 1), wanted))


COMMIT_JOBS_PER_WORKER = 10
"""Commit jobs queued (on every line) that one more commit worker is worth: jobs are short
(phase 2 runs in OV), a worker takes them one at a time."""


def commit_workers(queued: int, *, per_worker: int = COMMIT_JOBS_PER_WORKER) -> int:
    """Commit workers for ``queued`` jobs waiting on the commit lines (workers.commits.lines):
    one per ``per_worker``, at least 1 (every worker sweeps the commits in flight and moves
    due jobs). The autoscaler's own ceiling caps it."""
    return max(1, math.ceil(max(queued, 0) / max(per_worker, 1)))
