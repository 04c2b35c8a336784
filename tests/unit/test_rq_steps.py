"""RQ's steps around a commit job without the writes it does not need (workers.commits.rq_steps):
what is left in Redis after a job, done or failed, is what RQ's own steps leave (the job's
hash and status, the registries, the lifetimes; a failed job's result, not a done one's), in
fewer commands."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import fakeredis
import pytest
import redis
from rq import Queue, SimpleWorker
from rq.job import Job

from workers.commits.rq_record import LeanWorkerRecord
from workers.commits.rq_steps import LeanJobSteps


def doubled(n: int) -> int:
    return 2 * n


def refused(n: int) -> int:
    raise ValueError(f"no {n}")


class _Before(LeanWorkerRecord, SimpleWorker):
    """A commit worker without the lean steps (its record already lean: workers.commits.rq_record)."""


class _Lean(LeanJobSteps, LeanWorkerRecord, SimpleWorker):
    """As workers.commits.worker.CommitWorker composes them."""


class _CountingPipeline(redis.client.Pipeline):
    """A pipeline that counts what it sends (its own class, not patched methods: a closure
    holding the pipeline made a cycle, and fakeredis hung when the garbage collector reset one
    in the middle of another command)."""

    sent: list[str]

    def pipeline_execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]).upper())
        return super().pipeline_execute_command(*args, **options)

    def immediate_execute_command(self, *args: Any, **options: Any) -> Any:  # WATCH and the reads after it
        self.sent.append(str(args[0]).upper())
        return super().immediate_execute_command(*args, **options)

    def execute(self, raise_on_error: bool = True) -> Any:  # a MULTI/EXEC is a round trip of its own
        if self.command_stack:
            self.sent.append("EXEC" if self.transaction else "PIPELINE")
        return super().execute(raise_on_error)


class _Counting(fakeredis.FakeRedis):
    """Counts the commands sent (a pipeline's one by one, as Redis counts them)."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]).upper())
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = _CountingPipeline
        pipe.sent = self.sent
        return pipe


VOLATILE = {"created_at", "enqueued_at", "started_at", "ended_at", "last_heartbeat", "worker_name"}


def _run(worker_class: type[SimpleWorker], func: Any, result_ttl: int) -> tuple[dict[str, Any], list[str]]:
    """One job through a worker of ``worker_class`` (burst); what Redis holds after, and the
    commands the worker sent for it."""
    redis = _Counting()
    redis.sent = []
    queue = Queue("commits", connection=redis)
    job = queue.enqueue(func, 21, job_id="commit_1", result_ttl=result_ttl, failure_ttl=600)
    worker = worker_class([queue], connection=redis)
    redis.sent.clear()
    worker.work(burst=True)
    fields = {k.decode(): v for k, v in redis.hgetall(job.key).items() if k.decode() not in VOLATILE}
    fields.pop("data", None)  # the pickled call, the same both ways (its bytes carry no time)
    held = {
        "job": fields,
        "job_ttl": redis.ttl(job.key) > 0 if redis.exists(job.key) else None,
        "status": Job.fetch(job.id, connection=redis).get_status() if redis.exists(job.key) else None,
        "result": _result_kind(Job.fetch(job.id, connection=redis)) if redis.exists(job.key) else None,
        "finished": queue.finished_job_registry.get_job_ids(),
        "failed": queue.failed_job_registry.get_job_ids(),
        "started": queue.started_job_registry.get_job_ids(),
        "executions": redis.zcard(f"rq:executions:{job.id}"),
        "dependents_keys": redis.exists(job.dependents_key, job.dependencies_key),
    }
    return held, redis.sent


def _result_kind(job: Job) -> str | None:
    result = job.latest_result()
    return result.type.name if result is not None else None


@pytest.mark.parametrize(
    ("func", "result_ttl", "rq_result"),
    [(doubled, 500, "SUCCESSFUL"), (doubled, -1, "SUCCESSFUL"), (refused, 500, "FAILED")],
    ids=["done", "done-kept-forever", "failed"],
)
def test_what_redis_holds_after_a_job_is_what_rq_leaves(func: Any, result_ttl: int, rq_result: str) -> None:
    """All of it, but for a done job's result (a failed job's is RQ's: ``job_error`` reads it)."""
    rq_holds, rq_sent = _run(_Before, func, result_ttl)
    lean_holds, lean_sent = _run(_Lean, func, result_ttl)
    assert rq_holds.pop("result") == rq_result
    assert lean_holds.pop("result") == (None if rq_result == "SUCCESSFUL" else rq_result)
    assert lean_holds == rq_holds
    assert rq_holds["status"] in ("finished", "failed") and rq_holds["started"] == []
    assert len(lean_sent) < len(rq_sent), (lean_sent, rq_sent)


def test_a_done_job_costs_fewer_commands_none_of_them_for_dependents_or_its_result() -> None:
    _, rq_sent = _run(_Before, doubled, 500)
    lean_holds, lean_sent = _run(_Lean, doubled, 500)
    assert lean_holds["status"] == "finished" and lean_holds["finished"] == ["commit_1"]
    left_out = Counter(rq_sent) - Counter(lean_sent)
    # two job heartbeats and the status written alone before the job's hash; the dependents'
    # WATCH and SMEMBERS and two lifetimes; the result's XADD and lifetime; and the LREM from
    # RQ's intermediate list (a plain queue's here: a commit line's job is popped, never moved);
    # and the MULTI/EXEC of the job's execution record, written with the job's start
    assert left_out == Counter({"HSET": 3, "EXPIRE": 3, "WATCH": 1, "SMEMBERS": 1, "XADD": 1, "LREM": 1, "EXEC": 1}), (
        left_out
    )
    assert not Counter(lean_sent) - Counter(rq_sent)


def test_a_job_whose_result_is_not_kept_is_deleted_as_rq_deletes_it() -> None:
    rq_holds, _ = _run(_Before, doubled, 0)
    lean_holds, _ = _run(_Lean, doubled, 0)
    assert lean_holds == rq_holds
    assert lean_holds["status"] is None and lean_holds["finished"] == []


def redis_gone(n: int) -> int:
    raise redis.exceptions.ConnectionError("Connection closed by server.")


@pytest.mark.parametrize(
    ("func", "said", "traceback"),
    [(redis_gone, "met Redis away (ConnectionError: Connection closed by server.)", False), (refused, "no 21", True)],
    ids=["redis-away", "the-job-failed"],
)
def test_a_job_that_meets_redis_away_is_one_line_a_failed_job_rqs_error(
    func: Any, said: str, traceback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="rq.worker"):
        _run(_Lean, func, 500)
    assert said in caplog.text
    assert ("Traceback" in caplog.text) == traceback


def test_a_done_job_is_not_said_to_keep_a_result_it_does_not_keep(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rq.worker"):
        _run(_Before, doubled, 500)
    assert "result is kept for 500 seconds" in caplog.text  # RQ's line, where RQ keeps it
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rq.worker"):
        _run(_Lean, doubled, 500)
    assert "Job OK" in caplog.text and "result is kept" not in caplog.text
