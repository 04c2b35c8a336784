"""What capture, the RPC and the status read model may use of the commit chain (an import
contract keeps it so): ask for a commit (``request_commit``), wait for its outcome
(``wait_commit_outcome``), read the record of truth (``CommitRecords``, ``FINAL_STATUSES``,
``final_or_timeout``, ``outcome_status``, ``outcome_statuses_after``) and count the queue's jobs (``commit_queue``).
Everything else in ``workers.commits`` (the jobs, the tenant's order, the sweep, the
worker) is the commit workers' own.
"""

from workers.commits.queue import commit_queue
from workers.commits.records import (
    FINAL_STATUSES,
    CommitRecords,
    final_or_timeout,
    outcome_status,
    outcome_statuses_after,
)
from workers.commits.request import request_commit, wait_commit_outcome

__all__ = [
    "FINAL_STATUSES",
    "CommitRecords",
    "commit_queue",
    "final_or_timeout",
    "outcome_status",
    "outcome_statuses_after",
    "request_commit",
    "wait_commit_outcome",
]
