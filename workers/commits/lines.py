"""The commit queue's lines: one Redis list per tenant and urgency (core.fairness), read by
the workers in turn.

RQ keeps one list per queue and a worker pops the head. Here every job still belongs to the
one commit queue (its ``origin``, so RQ's registries — scheduled, started, failed — and
``ovstream status`` stay as they were), but its id is pushed onto its *line*'s list:
``LineQueue`` is the commit queue with the line's list as its key. The lines in use are kept
in ``Keys.commit_lines`` (line -> when a job was last pushed onto it), written before the push,
so a worker never misses a line with a job in it; a line idle and empty for ``LINE_IDLE_S``
leaves it. A worker (workers.commits.worker.CommitWorker) reads them through ``CommitLines``:
RQ's own dequeue over ``dequeue_order`` of them, the queue's own list as the legacy line (what
an earlier release queued), and last a *doorbell* list: the first push onto a line new to the
registry rings it once per worker, so a worker blocked on the lines it read before the new one
existed wakes up, reads the lines again, and takes its job; a busy worker reads them again
every ``LINES_FRESH_S``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import redis as redis_lib
from rq import Queue
from rq.exceptions import DequeueTimeout, DuplicateJobError, NoSuchJobError
from rq.job import Job
from rq.scripts import UNIQUE_ENQUEUE_SCRIPT, _build_hset_args
from rq.utils import as_text
from rq.worker_registration import WORKERS_BY_QUEUE_KEY

from core.config import Settings
from core.events import CommitRequest
from core.fairness import LEGACY_LINE, dequeue_order, line_of, served
from core.repair import is_repair_session
from workers.store.connection import text
from workers.store.keys import Keys
from workers.store.lua import Lua
from workers.store.scripts import FORGET_IDLE_LINES

LINE_META = "line"
"""The job's ``meta`` field naming its line (none: the legacy line)."""
LINE_IDLE_S = 300
"""A line with no job pushed for this long and none left leaves ``Keys.commit_lines``."""
LINES_FRESH_S = 0.5
"""A worker reads the lines again before a dequeue when its view is older (or the doorbell rang)."""
DOORBELL_MAX = 64
"""Rings kept when no worker is blocked to take them (each wakes one worker)."""


RQ_UNIQUE_ENQUEUE = Lua(UNIQUE_ENQUEUE_SCRIPT)
"""RQ's own script of a unique enqueue (the job saved and pushed unless a job of its id exists),
sent in a pipeline with the line's registration (``LineQueue.enqueue_job``)."""


def register_lines(client: Any, registry: str, lines: set[str]) -> Any:
    """``lines`` in use from now, in ``registry`` (``Keys.commit_lines``: what workers read),
    on ``client`` (a client or a pipeline); its answer counts those that were not there."""
    return client.zadd(registry, dict.fromkeys(lines, time.time()))


class LineQueue(Queue):
    """The commit queue, its jobs pushed onto the list of ``line``: the job's origin is the
    queue's name (its registries are the queue's), its id goes to ``key``; a push registers the
    line in ``registry`` (``Keys.commit_lines``) first, when given."""

    def __init__(self, name: str, line: str, key: str, registry: str | None = None, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.line = line
        self._key = key
        self.registry = registry
        self.entered_new = False
        """Whether the last push registered the line anew (``CommitLines.ring`` after it)."""

    def enqueue_job(self, job: Job, pipeline: Any = None, at_front: bool = False, unique: bool = False) -> Job:
        """RQ's, without its SADD of the queue's key to ``rq:queues`` on every push (in a
        MULTI/EXEC of its own: 3 of a commit's Redis commands): workers read the lines from
        ``Keys.commit_lines``, and RQ's registry of queues lists the commit queue. No commit
        job depends on another (RQ's own path for one that does). A unique push (a commit's)
        is sent with the line's registration, ahead of it on the same connection (the queue's
        Redis is never a cluster: RQ does not speak it): one round trip, not two."""
        job.origin = self.name
        registry, lines = self.registry, {self.line}
        if job._dependency_ids or not unique or pipeline is not None or registry is None:
            self.entered_new = registry is not None and bool(register_lines(self.connection, registry, lines))
            if job._dependency_ids:
                return super().enqueue_job(job, pipeline=pipeline, at_front=at_front, unique=unique)
            return self._enqueue_job(job, pipeline=pipeline, at_front=at_front, unique=unique)
        self._prepare_for_queue(job)  # what RQ's unique enqueue does, then its script
        ttl = job.ttl if job.ttl is not None else -1
        with self.connection.pipeline(transaction=False) as pipe:
            register_lines(pipe, registry, lines)  # ahead of its push
            # rq.scripts' own arguments (rq pinned to 2.12: workers.commits.rq_steps reads its steps too)
            args = [job.id, "L" if at_front else "R", ttl, *_build_hset_args(job)]  # type: ignore[no-untyped-call]
            RQ_UNIQUE_ENQUEUE(pipe, [job.key, self.key], args)
            added, pushed = pipe.execute()
        if not pushed:
            raise DuplicateJobError(f"Job with ID '{job.id}' already exists")
        self.entered_new = bool(added)
        return job


class Doorbell(LineQueue):
    """Not a line: the list a push rings. Popped by a worker, it makes it read the lines again."""

    def __init__(self, name: str, key: str, lines: CommitLines, **kwargs: Any) -> None:
        super().__init__(name, "", key, **kwargs)
        self.lines = lines


class CommitQueue(Queue):
    """RQ's queue class for the commit workers: a dequeue over lines that knows the doorbell."""

    @classmethod
    def dequeue_any(
        cls,
        queues: Iterable[Queue],
        timeout: int | None,
        connection: redis_lib.Redis,
        job_class: type[Job] | None = None,
        serializer: Any = None,
        death_penalty_class: Any = None,
    ) -> tuple[Job, Queue] | None:
        """RQ's ``dequeue_any`` (the first job of the first list with one, blocking up to
        ``timeout``) answering, for the doorbell, ``DequeueTimeout``: RQ's worker loop then
        asks again, over the lines as they are now."""
        by_key = {q.key: q for q in queues}
        while True:
            popped = cls.lpop(list(by_key), timeout, connection=connection)
            if popped is None:
                return None
            key, job_id = as_text(popped[0]), as_text(popped[1])
            queue = by_key[key]
            if isinstance(queue, Doorbell):
                if queue.lines.closing:  # its worker is stopping: RQ's loop ends on no job
                    return None
                queue.lines.stale = True
                raise DequeueTimeout(timeout, list(by_key))
            try:
                job = (job_class or Job).fetch(job_id, connection=connection, serializer=serializer)
            except NoSuchJobError:
                continue  # deleted while queued (RQ's dequeue does the same)
            return job, queue


class CommitLines:
    """The lines of the commit queue ``settings.commit_queue_name`` on the queue's Redis
    ``connection``: pushing onto them, and one worker's view and rotation of them."""

    def __init__(self, connection: redis_lib.Redis, settings: Settings) -> None:
        self.connection, self.settings = connection, settings
        self.keys = Keys(settings.key_prefix)
        self.name = settings.commit_queue_name
        self.rotation: list[str] = []
        """Tenants' tags in the order this worker serves them next (core.fairness)."""
        self.stale = True
        self.closing = False
        """Set (with a ring) to end the blocked dequeue of the worker reading these lines: RQ's
        loop takes "no job" for its end (workers.commits.more_queues stops its workers so)."""
        self._read_at = 0.0
        self._lines: list[str] = []
        """The lines as this worker last read them (``LINES_FRESH_S``)."""
        self._queues: list[Queue] = []

    # --- pushing ---------------------------------------------------------------------------

    def queue(self, line: str) -> Queue:
        """The queue a job of ``line`` is pushed through (the legacy line: the queue's own list)."""
        if line == LEGACY_LINE:
            return Queue(self.name, connection=self.connection)
        return LineQueue(
            self.name, line, self.keys.commit_line(line), self.keys.commit_lines(), connection=self.connection
        )

    def enter(self, lines: set[str]) -> bool:
        """Before a push onto each of ``lines``: they are in use (from now). True when one of
        them was not in the registry (then ``ring`` after the push)."""
        lines = lines - {LEGACY_LINE}
        if not lines:
            return False
        return bool(register_lines(self.connection, self.keys.commit_lines(), lines))

    def ring(self) -> None:
        """After the first push onto a line new to the registry: every worker blocked on the
        lines it read before wakes once and reads them again (one ring each, as many as RQ
        counts workers on the queue); a line it knows wakes it by itself."""
        rings = max(1, min(DOORBELL_MAX, int(self.connection.scard(WORKERS_BY_QUEUE_KEY % self.name))))
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.rpush(self.keys.commit_doorbell(), *([1] * rings))
            pipe.ltrim(self.keys.commit_doorbell(), -DOORBELL_MAX, -1)
            pipe.execute()

    def enqueue(self, line: str, func: Any, *args: Any, **options: Any) -> Job:
        """``Queue.enqueue`` onto ``line``: registered first (``LineQueue``), rung after when
        the line is new."""
        meta = {**options.pop("meta", {}), LINE_META: line}
        queue = self.queue(line)
        job = queue.enqueue(func, *args, meta=meta, **options)
        if isinstance(queue, LineQueue) and queue.entered_new:
            self.ring()
        return job

    def forget_idle(self) -> int:
        """Lines empty and idle for ``LINE_IDLE_S`` leave the registry; how many left."""
        return int(
            FORGET_IDLE_LINES(
                self.connection,
                [self.keys.commit_lines()],
                [time.time() - LINE_IDLE_S, self.keys.commit_line(""), Queue.redis_queues_keys],
            )
        )

    # --- a worker's view ----------------------------------------------------------------------

    def lines(self) -> list[str]:
        """Every line in use."""
        return [text(m) for m in self.connection.zrange(self.keys.commit_lines(), 0, -1)]

    def dequeue_queues(self) -> list[Queue]:
        """What a worker pops from, in turn: the lines (``dequeue_order``), then the doorbell.
        The lines are read again when the view is ``LINES_FRESH_S`` old or the doorbell rang."""
        now = time.monotonic()
        if self.stale or now - self._read_at >= LINES_FRESH_S or not self._queues:
            self._lines = [*self.lines(), LEGACY_LINE]
            self._read_at, self.stale = now, False
            self._order()
        return self._queues

    def served(self, queue: Queue) -> None:
        """A job was taken from ``queue``: its tenant goes to the back of the rotation (the
        order follows from the lines as read, without reading them again)."""
        line = queue.line if isinstance(queue, LineQueue) else LEGACY_LINE
        self.rotation = served(self.rotation, line)
        self._order()

    def _order(self) -> None:
        order, self.rotation = dequeue_order(self.rotation, self._lines)
        self._queues = [self.queue(line) for line in order]
        self._queues.append(Doorbell(self.name, self.keys.commit_doorbell(), self, connection=self.connection))

    # --- reading --------------------------------------------------------------------------------

    def queued(self) -> int:
        """Jobs waiting in every line (the legacy one too)."""
        lines = self.lines()
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.llen(Queue(self.name, connection=self.connection).key)
            for line in lines:
                pipe.llen(self.keys.commit_line(line))
            return sum(int(n) for n in pipe.execute())

    def job_ids(self) -> list[str]:
        """The ids queued on every line (the legacy one first)."""
        with self.connection.pipeline(transaction=False) as pipe:
            for line in [LEGACY_LINE, *self.lines()]:
                pipe.lrange(self.queue(line).key, 0, -1)
            return [text(i) for ids in pipe.execute() for i in ids]

    def remove(self, job: Job) -> None:
        """Take ``job`` off its line (it stays in RQ: dequeued, say, by a worker that died)."""
        self.queue(line_of_job(job)).remove(job.id)

    def holds(self, job: Job) -> bool:
        """Whether ``job`` (queued) is where a worker reads it: on its line's list with the line
        in the registry, or on the queue's own list (where an earlier release's worker moves a
        due job of any line, during an upgrade)."""
        line = line_of_job(job)
        if line != LEGACY_LINE and self.connection.lpos(self.queue(line).key, job.id) is not None:
            return self.connection.zscore(self.keys.commit_lines(), line) is not None
        return self.connection.lpos(self.queue(LEGACY_LINE).key, job.id) is not None


def line_of_job(job: Job) -> str:
    """The line ``job`` is pushed onto (the legacy line for a job an earlier release made)."""
    return str((job.meta or {}).get(LINE_META, LEGACY_LINE))


def line_of_request(request: CommitRequest) -> str:
    """The line of every job of ``request``'s commit chain (core.fairness.line_of); a repair's
    commit (asked for as "manual") is background work."""
    return line_of(request.user, None if is_repair_session(request.ov_session_id) else request.reason)


def background_line(tenant: str | None) -> str:
    """The line of a tenant's background work that is no commit's own (a repair)."""
    return line_of(tenant, None)
