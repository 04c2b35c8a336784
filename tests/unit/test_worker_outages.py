"""``ovstream worker`` outlives RQ's loop quitting on Redis: RQ logs "Redis connection timeout,
quitting..." and returns (a cluster master killed under a blocking dequeue), or raises a
connection error outside its wait; either way the process starts a new worker once Redis
answers, and ends only when it was asked to (SIGTERM/SIGINT)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import fakeredis
import pytest
import redis as redis_lib
from redis.exceptions import ClusterDownError

from core.backoff import Backoff
from core.config import Settings
from workers.commits import worker as worker_mod
from workers.commits.rq_logs import RQLogsTellTheTruth


class _Worker:
    """What ``work_through_outages`` uses of an RQ worker: ``work()``, its name, and the date
    RQ sets when a signal asked it to stop."""

    def __init__(self, name: str, ending: str) -> None:
        self.name, self.ending = name, ending
        self._shutdown_requested_date: datetime | None = None
        self.rounds = 0
        self.dead = False

    def register_death(self) -> None:
        self.dead = True

    def work(self) -> bool:
        self.rounds += 1
        if self.ending == "asked":  # RQ's request_stop: the date, then its loop breaks
            self._shutdown_requested_date = datetime.now(UTC)
        elif self.ending == "raises":
            raise redis_lib.ConnectionError("Connection refused")
        elif self.ending == "raises-readonly":  # a failover's reply, not an error class of its own
            raise redis_lib.ResponseError("READONLY You can't write against a read only replica.")
        return False  # "quits": RQ's `except TimeoutError: ... quitting...; break`


def _work_through_outages(first: _Worker, mover: SimpleNamespace) -> None:
    """The loop over an in-process Redis that answers (the wait for Redis returns at once)."""
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    worker_mod.work_through_outages(fakeredis.FakeRedis(), settings, cast(Any, first), cast(Any, mover))


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[_Worker]:
    """Each new worker the loop makes stops as asked; the list says how many it made."""
    workers: list[_Worker] = []

    def make_worker(redis: Any, settings: Settings, **_: Any) -> _Worker:
        workers.append(_Worker(f"new-{len(workers)}", "asked"))
        return workers[-1]

    monkeypatch.setattr(worker_mod, "make_worker", make_worker)
    monkeypatch.setattr(worker_mod, "REDIS_RETRY", Backoff(0.01))
    monkeypatch.setattr(worker_mod, "RQ_LOG", RQLogsTellTheTruth())  # no reason another test left
    worker_mod._STOP.clear()
    return workers


@pytest.mark.parametrize("ending", ["quits", "raises", "raises-readonly"])
def test_a_worker_that_quits_on_redis_is_replaced(
    made: list[_Worker], ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = _Worker("first", ending)
    mover = SimpleNamespace(worker_name="first")
    with caplog.at_level(logging.WARNING, logger=worker_mod.__name__):
        _work_through_outages(first, mover)
    assert first.rounds == 1
    assert [w.rounds for w in made] == [1]  # one new worker, and it ended as asked
    assert mover.worker_name == "new-0"  # the mover's heartbeat names the live worker
    assert first.dead  # the replaced worker leaves no entry in RQ's registry
    said = "quit unasked (Redis failed)" if ending == "quits" else "lost Redis"
    assert any(said in r.getMessage() for r in caplog.records), caplog.text


def test_a_worker_quitting_says_the_error_rq_ended_on(
    made: list[_Worker], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    truth = RQLogsTellTheTruth()
    monkeypatch.setattr(worker_mod, "RQ_LOG", truth)
    refused = redis_lib.ResponseError("READONLY You can't write against a read only replica.")
    assert not truth.filter(_rq_record("Worker %s: found an unhandled exception, quitting...", "w", error=refused))
    with caplog.at_level(logging.WARNING, logger=worker_mod.__name__):
        _work_through_outages(_Worker("first", "quits"), SimpleNamespace(worker_name="first"))
    said = [r.getMessage() for r in caplog.records if "quit unasked" in r.getMessage()]
    assert said and "(ResponseError: READONLY You can't write against a read only replica.)" in said[0], said
    assert truth.quit_reason is None  # said once


def test_a_worker_asked_to_stop_ends_the_loop(made: list[_Worker]) -> None:
    first = _Worker("first", "asked")
    _work_through_outages(first, SimpleNamespace(worker_name="first"))
    assert first.rounds == 1 and made == []


def test_a_stop_while_waiting_for_redis_ends_the_loop(made: list[_Worker]) -> None:
    worker_mod._STOP.set()  # SIGTERM after RQ's loop quit, before Redis answered
    try:
        _work_through_outages(_Worker("first", "quits"), SimpleNamespace(worker_name="first"))
    finally:
        worker_mod._STOP.clear()
    assert made == []


def test_a_worker_started_while_the_cluster_is_down_waits_for_it(
    made: list[_Worker], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A node answers PING while its cluster is still down: the deployment check's CLUSTERDOWN
    is waited out like the PING's refusal, not the process's end (it exited 1)."""
    refusals = [ClusterDownError("The cluster is down"), redis_lib.ResponseError("LOADING Redis is loading")]

    def check_deployment(client: Any, settings: Settings) -> None:
        if refusals:
            raise refusals.pop(0)

    monkeypatch.setattr(worker_mod, "check_deployment", check_deployment)
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    with caplog.at_level(logging.WARNING, logger=worker_mod.__name__):
        started = worker_mod._start_on_redis(cast(Any, fakeredis.FakeRedis()), settings)
    assert started is made[0] and refusals == []
    assert sum("does not serve yet" in r.getMessage() for r in caplog.records) == 2, caplog.text


def test_a_worker_started_on_a_redis_that_fails_otherwise_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def check_deployment(client: Any, settings: Settings) -> None:
        raise redis_lib.ResponseError("NOPERM this user has no permissions to run the 'eval' command")

    monkeypatch.setattr(worker_mod, "check_deployment", check_deployment)
    with pytest.raises(redis_lib.ResponseError, match="NOPERM"):
        worker_mod._start_on_redis(cast(Any, fakeredis.FakeRedis()), Settings(redis_url="redis://127.0.0.1:1/0"))


def _rq_record(message: str, *args: object, error: BaseException | None = None) -> logging.LogRecord:
    record = logging.LogRecord("rq.worker", logging.ERROR, __file__, 1, message, args, None)
    if error is not None:
        record.exc_info = (type(error), error, None)
    return record


def test_rqs_quitting_lines_say_what_happens() -> None:
    truth = RQLogsTellTheTruth()
    # a Redis error ends RQ's loop: left out (work_through_outages says what follows)
    assert not truth.filter(_rq_record("Worker %s: Redis connection timeout, quitting...", "w"))
    oom = redis_lib.OutOfMemoryError("OOM command not allowed")
    assert not truth.filter(_rq_record("Worker %s: found an unhandled exception, quitting...", "w", error=oom))
    # anything else is kept, with its traceback, without the word
    bug = _rq_record("Worker %s: found an unhandled exception, quitting...", "w", error=KeyError("x"))
    assert truth.filter(bug) and "quitting" not in bug.getMessage() and bug.exc_info is not None
    # RQ's retries while Redis is away: one line an outage, a warning
    first = _rq_record("Worker %s: could not connect to Redis instance: %s retrying in %d seconds...", "w", "down", 1)
    assert truth.filter(first) and first.levelno == logging.WARNING and "Redis unreachable" in first.getMessage()
    again = _rq_record("Worker %s: could not connect to Redis instance: %s retrying in %d seconds...", "w", "down", 1)
    assert not truth.filter(again)
    assert truth.filter(_rq_record("Worker %s: %s: %s (%s)", "w", "q", "commit", "id"))  # others pass
