"""What capture, the RPC and the status read model may use of the commit chain (an import
contract keeps it so): ask for a commit (``request_commit``), wait for its outcome
(``wait_commit_outcome``), read the record of truth (``CommitRecords``, ``FINAL_STATUSES``,
``final_or_timeout``, ``outcome_status``, ``outcome_statuses_after``, ``in_flight_requests``),
count the queue's jobs
(``commit_queue``) and read the lost extractions and their repairs (``read_lost_extractions``).
Everything else in ``workers.commits`` (the jobs, the repairs, the sweep, the worker) is the
commit workers' own.
"""

from workers.commits.queue import commit_queue, job_counts
from workers.commits.records import (
    FINAL_STATUSES,
    CommitRecords,
    final_or_timeout,
    in_flight_requests,
    outcome_status,
    outcome_statuses_after,
)
from workers.commits.repair import LostExtractions, read_lost_extractions
from workers.commits.request import request_commit, wait_commit_outcome

__all__ = [
    "FINAL_STATUSES",
    "CommitRecords",
    "LostExtractions",
    "commit_queue",
    "final_or_timeout",
    "in_flight_requests",
    "job_counts",
    "outcome_status",
    "outcome_statuses_after",
    "read_lost_extractions",
    "request_commit",
    "wait_commit_outcome",
]
