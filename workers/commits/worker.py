"""Running the commit jobs: ``ovstream worker``, the embedded worker of ``ovstream up``,
``drain_jobs`` for tests, and ``ovstream commits`` (the outcome table).

``ovstream worker`` is an RQ SimpleWorker on ``settings.commit_queue_name``:
jobs run in the worker process itself, which keeps one job context (event
loop, OV pool, Redis client) for all of them, the way arq does; RQ's death
penalty still ends a job that overruns. Due scheduled jobs (rechecks, extraction checks,
repairs) are moved by every worker (workers.commits.scheduler), not by RQ's single locked
scheduler; phase-2 reads are no jobs: each worker's poller makes them
(workers.commits.poller). Inside one process (``up``, tests) jobs
run in an ``EmbeddedWorker``: a SimpleWorker that installs no signal handlers
and times jobs out with a timer, so it can run off the main thread; it works
in burst rounds, each of which first moves the due jobs onto the queue.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator

import redis as redis_lib
from rq import Queue, SimpleWorker
from rq.timeouts import TimerDeathPenalty
from rq.worker import BaseWorker

from core.backoff import Backoff
from core.config import Settings
from core.ov.version import check_at_start
from workers.commits import sweep as commit_sweep
from workers.commits.context import context_for, register
from workers.commits.lines import CommitLines, CommitQueue
from workers.commits.more_queues import MoreQueueWorker, queues_said, served_queues
from workers.commits.poller import PhasePoller, run_due_polls
from workers.commits.queue import commit_lines, commit_queue, job_counts
from workers.commits.rq_logs import RQ_LOG
from workers.commits.rq_record import LeanWorkerRecord
from workers.commits.rq_steps import LeanJobSteps
from workers.commits.scheduler import DueJobMover, move_due_jobs
from workers.liveness import BeatingThread, LivenessBeat
from workers.store.connection import (
    REDIS_ERRORS,
    RedisConfigError,
    connect,
    queue_client,
    redis_went_away,
    wait_for_redis,
)
from workers.store.deployment import DeploymentMismatch, check_deployment
from workers.store.health import forget_health

log = logging.getLogger(__name__)

MAINTENANCE_INTERVAL_S = 30
"""RQ's maintenance (registry cleaning) interval; RQ's default is 600 s."""
REDIS_RETRY = Backoff(0.5, 5.0)
"""The waits before ``ovstream worker`` starts a new RQ worker after losing Redis (core.backoff)."""


RQ_CONNECTION_RETRY_S = 1.0
"""RQ's dequeue loop tries Redis again this often while it is away (RQ doubles its wait up to
60 s: a worker took jobs again only 27 s after a 35 s outage ended)."""


class CommitWorker(LeanJobSteps, LeanWorkerRecord, SimpleWorker):
    """RQ's SimpleWorker taking jobs from the commit lines in turn, without a pubsub channel,
    trying Redis again every second; its RQ record written as often as something reads it
    (workers.commits.rq_record).

    Its queues, in RQ's dequeue, are the lines as ``CommitLines`` orders them (read again
    before a dequeue when old, or when the doorbell rang: workers.commits.lines); the tenant
    served goes to the back (``reorder_queues``). RQ's maintenance and registries stay those of
    the one commit queue (``self.queues``).

    The channel carries RQ's stop-job and shutdown commands, and ovstream sends none (SIGTERM
    stops a worker). With redis-py 8.1, a worker that unsubscribes waits for its pubsub thread,
    which sits up to 60 s waiting for a subscription that will not come: `ovstream worker`
    took a minute to honour SIGTERM, and each burst round of the embedded worker could stall
    a commit as long, at random."""

    exponential_backoff_factor = 1.0
    max_connection_wait_time = RQ_CONNECTION_RETRY_S
    queue_class = CommitQueue
    lines: CommitLines | None = None
    """Set by ``make_worker``; until then (RQ's own constructor) the queues RQ was given."""

    @property
    def _ordered_queues(self) -> list[Queue]:
        return self.lines.dequeue_queues() if self.lines is not None else self._given_queues

    @_ordered_queues.setter
    def _ordered_queues(self, queues: list[Queue]) -> None:
        self._given_queues = queues

    def reorder_queues(self, reference_queue: Queue) -> None:
        """After a job of ``reference_queue``'s line: its tenant to the back of the rotation."""
        if self.lines is not None:
            self.lines.served(reference_queue)

    def subscribe(self) -> None:
        """Nothing to listen to."""

    def unsubscribe(self) -> None:
        """Nothing was subscribed."""


class EmbeddedWorker(CommitWorker):
    """A CommitWorker that may run in any thread: no signal handlers, timer-based timeouts."""

    death_penalty_class = TimerDeathPenalty

    def _install_signal_handlers(self) -> None:
        """The host process owns the signals."""


def make_worker(redis: redis_lib.Redis, settings: Settings, *, embedded: bool = False, index: int = 0) -> BaseWorker:
    """An RQ worker on commit queue ``index``; jobs in this process use ``settings``."""
    register(settings)
    rq_log = logging.getLogger("rq.worker")
    if RQ_LOG not in rq_log.filters:
        rq_log.addFilter(RQ_LOG)
    # Jobs run in this process (no fork per job, as arq does): its JobContext
    # (workers.commits.context) keeps one event loop, OV pool and Redis client for all.
    cls: type[BaseWorker] = EmbeddedWorker if embedded else CommitWorker
    # Registries (abandoned jobs of a killed worker among them) are cleaned this often.
    queue = commit_queue(redis, settings, index)
    worker = cls([queue], connection=queue.connection, maintenance_interval=MAINTENANCE_INTERVAL_S)
    if isinstance(worker, CommitWorker):
        worker.lines = commit_lines(redis, settings, index)
    return worker


def jobs_waiting(redis: redis_lib.Redis, settings: Settings) -> int:
    """Jobs queued (on any line) or scheduled on the commit queue, and phase-2 reads due."""
    counts = job_counts(redis, settings)
    return counts["queued"] + counts["scheduled"] + counts["polling"]


def drain_jobs(
    redis: redis_lib.Redis,
    settings: Settings,
    *,
    until: Callable[[], bool] | None = None,
    timeout_s: float = 30.0,
    pause_s: float = 0.02,
) -> bool:
    """Run jobs in burst rounds until ``until()`` holds (else: until none is queued or scheduled).

    Returns False when ``timeout_s`` passed first.
    """
    workers = [make_worker(redis, settings, embedded=True, index=i) for i in range(len(settings.queue_urls))]
    deadline = time.monotonic() + timeout_s
    while True:
        for index, worker in enumerate(workers):
            commit_sweep.beat(redis, settings, worker.name)  # its jobs are not taken for orphans
            move_due_jobs(redis, settings, index)
            worker.work(burst=True, logging_level="WARNING")
        run_due_polls(redis, settings, context_for(settings.key_prefix))
        done = until() if until is not None else jobs_waiting(redis, settings) == 0
        if done:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(pause_s)


def run_embedded_worker(
    redis: redis_lib.Redis, settings: Settings, stop: threading.Event, *, pause_s: float = 0.1
) -> None:
    """Work the commit queue in burst rounds until ``stop`` is set (``ovstream up``); with Redis
    away (at start too) it waits, saying so once per outage."""
    worker: BaseWorker | None = None
    mover: DueJobMover | None = None
    away = False
    try:
        while not stop.is_set():
            try:
                if worker is None:
                    worker = make_worker(redis, settings, embedded=True)
                    log.info("embedded RQ worker %s on queue %s", worker.name, settings.commit_queue_name)
                    mover = DueJobMover(connect(settings), settings, worker.name)  # heartbeat, due jobs, sweeps
                    mover.start()
                move_due_jobs(redis, settings)  # at once each round, not only on the mover's tick
                worker.work(burst=True, logging_level="WARNING")
                run_due_polls(redis, settings, context_for(settings.key_prefix))
                if away:
                    log.info("embedded RQ worker: Redis answers again")
                away = False
            except Exception as exc:  # one bad round must not end the embedded worker
                if not redis_went_away(exc):
                    log.exception("embedded RQ worker round failed")
                elif not away:
                    log.warning("embedded RQ worker: Redis unavailable (%s); waiting for it", exc)
                    away = True
            stop.wait(pause_s)
    finally:
        if mover is not None:
            mover.stop()


# --- CLI ------------------------------------------------------------------------------------


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--burst", action="store_true", help="run the queued jobs, then exit")
    parser.add_argument(
        "--queue",
        type=int,
        action="append",
        metavar="N",
        help="serve the commit queue on queueRedisUrls[N] (repeat for more; default: every one)",
    )


def cli_worker(settings: Settings, args: argparse.Namespace) -> int:
    if settings.embedded_redis and not getattr(args, "burst", False):
        log.error("redis_url is fakeredis:// (in-process): run the worker inside `ovstream up` instead")
        return 2
    alive = BeatingThread(LivenessBeat(settings, "worker"))  # ovstream health --probe live
    alive.beat_now()
    alive.start()
    try:
        return _run_worker(settings, args)
    finally:
        alive.stop()


def _run_worker(settings: Settings, args: argparse.Namespace) -> int:
    queues = served_queues(settings, getattr(args, "queue", None))
    if isinstance(queues, str):
        log.error("%s", queues)
        return 2
    redis = connect(settings)
    try:
        worker = _start_on_redis(redis, settings, queues)
    except DeploymentMismatch as exc:
        log.error("%s", exc)
        return 2
    if worker is None:
        return 0 if _STOP.is_set() else 2
    if not check_at_start(settings, "ovstream worker"):
        return 2
    burst = bool(getattr(args, "burst", False))
    log.info(
        "RQ worker %s on queue %s%s (moving due jobs itself)",
        worker.name,
        settings.commit_queue_name,
        queues_said(settings, queues),
    )
    if burst:
        for index in queues:
            move_due_jobs(redis, settings, index)
            (worker if index == queues[0] else make_worker(redis, settings, index=index)).work(burst=True)
        run_due_polls(redis, settings, context_for(settings.key_prefix))
        return 0
    mover = DueJobMover(connect(settings), settings, worker.name, queues)  # workers.commits.scheduler: why not RQ's
    mover.start()
    poller = PhasePoller(connect(settings), settings)  # workers.commits.phase2_due: why not RQ jobs
    poller.start()
    more = [MoreQueueWorker(redis, settings, index, mover, make_worker) for index in queues[1:]]
    for thread in more:
        thread.start()
    try:
        work_through_outages(redis, settings, worker, mover, queues[0])
    finally:
        for thread in more:
            thread.stop()
        mover.stop()
        poller.stop()
    return 0


_STOP = threading.Event()
"""SIGTERM or SIGINT while the worker waits for Redis (RQ's own handlers come with ``work``)."""


@contextlib.contextmanager
def _stop_on_signal() -> Iterator[None]:
    """SIGTERM and SIGINT set ``_STOP`` inside the block (outside RQ's ``work``)."""
    previous = {sig: signal.signal(sig, lambda *_: _STOP.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _redis_answers(redis: redis_lib.Redis, settings: Settings, *, queue: int | None = None) -> bool:
    """Wait for Redis (the store, or the ``queue``'s) before RQ touches it (start order does not
    matter): True once it answers; False when stopped while waiting, or Redis refuses us
    (logged, a config error)."""
    with _stop_on_signal():
        try:
            url = settings.redis_url if queue is None else settings.queue_urls[queue]
            return wait_for_redis(redis, settings, "ovstream worker", _STOP.is_set, url=url)
        except RedisConfigError as exc:
            log.error("%s", exc)
            return False


def _start_on_redis(redis: redis_lib.Redis, settings: Settings, queues: tuple[int, ...] = (0,)) -> BaseWorker | None:
    """Wait for the store and the ``queues``' Redis (start order does not matter), check the
    deployment and make the RQ worker of the first queue; None when stopped first or Redis
    refuses us. A cluster node answers PING while the cluster is still down (its slots
    unserved), so what follows the PING waits that out too (a worker started beside a
    cluster coming back exited 1 on CLUSTERDOWN)."""
    while _redis_answers(redis, settings) and all(
        _redis_answers(queue_client(redis, settings, i), settings, queue=i) for i in queues
    ):
        try:
            check_deployment(redis, settings)  # DeploymentMismatch: the caller says it, exit 2
            return make_worker(redis, settings, index=queues[0])
        except Exception as exc:
            if not redis_went_away(exc):
                raise
            log.warning("ovstream worker: Redis answers but does not serve yet (%s); waiting", exc)
            with _stop_on_signal():
                if _STOP.wait(REDIS_RETRY.first_s):
                    return None
    return None


def _retire(redis: redis_lib.Redis, settings: Settings, old: BaseWorker) -> None:
    """The RQ worker a new one replaces leaves no entry behind: not in ``ovstream status``'s
    processes (its health record) nor in RQ's worker registry."""
    try:
        with redis.pipeline(transaction=False) as pipe:
            forget_health(pipe, settings, old.name)
            pipe.execute()
        old.register_death()  # type: ignore[no-untyped-call]
    except REDIS_ERRORS as exc:  # it expires on its own (HEALTH_TTL_S, RQ's worker TTL)
        log.debug("RQ worker %s: its entries stay until they expire: %s", old.name, exc)


def _asked_to_stop(worker: BaseWorker) -> bool:
    """SIGTERM/SIGINT reached RQ's handler (it sets the date whether or not a job was running)."""
    return getattr(worker, "_shutdown_requested_date", None) is not None or _STOP.is_set()


def work_through_outages(
    redis: redis_lib.Redis, settings: Settings, worker: BaseWorker, mover: DueJobMover, index: int = 0
) -> None:
    """``worker.work()`` until it stops as asked (SIGTERM); when Redis goes away, a new worker
    once it answers again. RQ's loop quits on a Redis timeout or error (it logs "Redis
    connection timeout, quitting..." and returns, or raises outside its dequeue wait), and a
    worker process that exits on a Redis restart or a cluster failover would leave every
    commit waiting for an operator: jobs, schedules and records are all in Redis, so there is
    nothing to lose by waiting it out."""
    failures = 0
    while True:
        failures += 1
        delay = REDIS_RETRY.delay(failures)
        try:
            worker.work()
            if _asked_to_stop(worker):
                return
            reason = RQ_LOG.take_quit_reason()
            log.warning("RQ worker %s quit unasked (%s); a new worker in %.1fs", worker.name, reason, delay)
        except Exception as exc:  # REDIS_AWAY, and a failover's error reply (READONLY, LOADING...)
            if not redis_went_away(exc):
                raise
            if _asked_to_stop(worker):
                return
            RQ_LOG.take_quit_reason()  # this error is the one said
            log.warning("RQ worker %s lost Redis (%s); a new worker in %.1fs", worker.name, exc, delay)
        # RQ's signal handlers, bound to the worker that quit, stay installed until the next
        # ``work()``: while we wait, a SIGTERM sets _STOP instead.
        with _stop_on_signal():
            if _STOP.wait(delay) or not _redis_answers(redis, settings):
                return
            try:
                old, worker = worker, make_worker(redis, settings, index=index)
            except REDIS_ERRORS:
                continue
            _retire(redis, settings, old)
        mover.worker_name = worker.name
        failures = 0
        log.info("RQ worker %s on queue %s (Redis back)", worker.name, settings.commit_queue_name)
