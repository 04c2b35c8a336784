"""A commit worker's RQ record (workers.commits.rq_record) is written when it would otherwise
fall short: a heartbeat when the hash's lifetime left is short of what RQ asks, a state when
it changes (busy and idle never), the counters never; what RQ reads of it (the lifetime) stays what it asked."""

from __future__ import annotations

import time
from typing import Any

import fakeredis
import pytest
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested

from workers.commits.lines import LineQueue
from workers.commits.rq_record import HEARTBEAT_EVERY_S, SUSPENSION_LOOK_S, LeanWorkerRecord


class _Worker(LeanWorkerRecord, SimpleWorker):
    pass


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    ticking = _Clock()
    monkeypatch.setattr(time, "monotonic", ticking)
    return ticking


@pytest.fixture
def worker(clock: _Clock) -> tuple[_Worker, Any]:
    redis = fakeredis.FakeRedis()
    made = _Worker([Queue("commits", connection=redis)], connection=redis, worker_ttl=420)
    made.register_birth()
    return made, redis


def _beat_said(redis: Any, worker: _Worker) -> Any:
    return redis.hget(worker.key, "last_heartbeat")


def test_a_heartbeat_is_written_only_when_the_lifetime_left_falls_short(
    worker: tuple[_Worker, Any], clock: _Clock
) -> None:
    made, redis = worker
    born = _beat_said(redis, made)
    made.heartbeat()  # just born: it lives 480 s, RQ asks for 480
    assert _beat_said(redis, made) == born
    clock.now += HEARTBEAT_EVERY_S - 1
    made.heartbeat()
    assert _beat_said(redis, made) == born
    clock.now += 2  # now more than HEARTBEAT_EVERY_S short of what RQ asks
    made.heartbeat()
    assert _beat_said(redis, made) != born
    assert redis.ttl(made.key) > 470


def test_a_job_asking_for_more_than_the_hash_has_left_is_written_at_once(worker: tuple[_Worker, Any]) -> None:
    made, redis = worker
    made.heartbeat(2000)  # a job whose timeout outlasts the worker's own lifetime
    assert redis.ttl(made.key) > 1990
    made.heartbeat(240)  # a shorter ask never shortens it
    assert redis.ttl(made.key) > 1990


def test_a_state_is_written_when_it_changes_but_busy_and_idle_never(worker: tuple[_Worker, Any]) -> None:
    made, redis = worker
    made.set_state("suspended")
    assert redis.hget(made.key, "state") == b"suspended"
    redis.hset(made.key, "state", "marked")
    made.set_state("suspended")  # unchanged: not written again
    assert redis.hget(made.key, "state") == b"marked"
    made.set_state("started")
    assert redis.hget(made.key, "state") == b"started"
    for around_a_job in ("busy", "idle"):  # two commands a commit, read by nothing of ovstream
        made.set_state(around_a_job)
        assert redis.hget(made.key, "state") == b"started"
        assert made.get_state() == around_a_job  # RQ's own view (its warm shutdown waits when busy)


def test_the_counters_and_the_working_time_are_not_kept(worker: tuple[_Worker, Any]) -> None:
    made, redis = worker
    with redis.pipeline() as pipe:
        made.increment_successful_job_count(pipe)
        made.set_current_job_working_time(0, pipe)
        pipe.execute()
    fields = set(redis.hkeys(made.key))
    assert not fields & {b"successful_job_count", b"current_job_working_time", b"total_working_time"}


def test_a_push_onto_a_line_does_not_register_the_line_as_an_rq_queue() -> None:
    redis = fakeredis.FakeRedis()
    line = LineQueue("commits", "acme", "ovs:commit-line:acme", connection=redis)
    job = line.enqueue(len, "abc", job_id="a-commit")
    assert redis.lrange("ovs:commit-line:acme", 0, -1) == [b"a-commit"]
    assert job.origin == "commits" and redis.smembers(Queue.redis_queues_keys) == set()


def test_a_suspension_check_is_one_command_a_second_until_rq_suspend_is_said(
    worker: tuple[_Worker, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    made, redis = worker
    sent: list[str] = []

    def exists(*keys: str) -> int:
        sent.append("EXISTS")
        return 0

    monkeypatch.setattr(made.connection, "exists", exists)
    made.check_for_suspension(burst=False)
    made.check_for_suspension(burst=False)  # the next job within the second: not looked at again
    assert sent == ["EXISTS"]
    made._suspension_looked_at -= SUSPENSION_LOOK_S  # a second on
    made.check_for_suspension(burst=False)
    assert sent == ["EXISTS", "EXISTS"]
    monkeypatch.undo()
    made._suspension_looked_at = float("-inf")
    redis.set("rq:suspended", 1)
    with pytest.raises(StopRequested):  # RQ's own handling once suspended: a burst ends
        made.check_for_suspension(burst=True)
