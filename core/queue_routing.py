"""Which of a deployment's queue Redis (``queueRedisUrls``) a session's commit jobs go to.

A pure function of the session and the number of queues: every process, of every release
that knows several queues, sends a session's commits to the same one, so its jobs (the
commit, its retries, its rechecks, checks and repairs) and their records in RQ are in one
place, and a worker that reads one queue sees a session's jobs whole. A stable hash
(SHA-256), not Python's ``hash`` (salted per process).
"""

from __future__ import annotations

import hashlib


def queue_index(scope: str, ov_session_id: str, queues: int) -> int:
    """The queue (0 .. ``queues`` - 1) of the session ``ov_session_id`` of ``scope`` (the
    tenant and agent it belongs to: ``workers.store.keys.session_keys``' scope).

    Rendezvous hashing: the queue whose hash with the session is highest. A Redis appended to
    the list takes about 1/n of the sessions (their next commits) and moves no other; with
    ``hash % n`` nearly every session would move."""
    if queues <= 1:
        return 0
    return max(range(queues), key=lambda i: _weight(scope, ov_session_id, i))


def _weight(scope: str, ov_session_id: str, queue: int) -> int:
    digest = hashlib.sha256(f"{scope}\x00{ov_session_id}\x00{queue}".encode()).digest()
    return int.from_bytes(digest[:8], "big")
