"""Every job of the commit chain survives a Redis blip: the jobs scheduled after phase 1 (a
phase-2 poll, a timeout's recheck, an extraction check and its repair's verdict) wait out a
store that is away like the commit job does, carry RQ retries beyond that, and a job that
still fails is counted where an operator looks (``ovstream status``, ``/metrics``:
tests/rpc/test_metrics_jobs.py).

A real redis-server of the test's own (killed and started again), the FakeOV in-process.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rq.job import Job

from core.config import Settings
from core.defaults import FOLLOW_UP_RETRY_INTERVALS_S
from core.events import CommitRequest, encode
from tests.helpers.commits import redis_away_at_the_first_check, running_commit
from workers.commits.context import context_of, register
from workers.commits.queue import commit_queue
from workers.commits.repair import check_extraction
from workers.commits.run import patiently, run_poll
from workers.commits.schedule import schedule_extraction_check, schedule_recheck
from workers.dev.local_redis import start_redis_server

pytestmark = pytest.mark.redis


def _request(sid: str = "blip") -> CommitRequest:
    return CommitRequest(
        commit_id=f"{sid}-c1",
        ov_session_id=sid,
        agent_id="main",
        reason="threshold",
        keep_recent_count=0,
        generation=1,
        requested_at=0.0,
    )


def test_every_job_scheduled_after_phase_one_carries_rq_retries(redis_client: Any, settings: Settings) -> None:
    """(A phase-2 read is no job: an entry of the due set, read again after a Redis blip
    when its claim lapses: tests/capture/test_phase2_due.py.)"""
    request = _request()
    schedule_recheck(redis_client, settings, request, round_=0)
    schedule_extraction_check(redis_client, settings, request)
    queue = commit_queue(redis_client, settings)
    ids = queue.scheduled_job_registry.get_job_ids()
    assert len(ids) == 2, ids
    for job_id in ids:
        job = Job.fetch(job_id, connection=queue.connection)
        assert job.retries_left == len(FOLLOW_UP_RETRY_INTERVALS_S), job_id
        assert job.retry_intervals == list(FOLLOW_UP_RETRY_INTERVALS_S), job_id


def test_an_extraction_check_waits_out_a_redis_blip(fake_ov: Any) -> None:
    server = start_redis_server()
    settings = Settings(redis_url=server.url, key_prefix="blip", ov_backoff_s=0.01)
    register(settings)
    server.kill()  # a failover's moment: the store refuses connections
    restarted = threading.Timer(1.5, server.restart)
    restarted.start()
    try:
        # Before: the job raised ConnectionError at once and RQ marked it failed (no retry),
        # its verdict gone. Now it waits for Redis as the commit and poll jobs do.
        said = check_extraction(encode(_request()).decode(), settings.key_prefix)
        assert said == "no archive"  # what it finds of a commit with no outcome recorded
    finally:
        restarted.join()
        server.stop()


def test_a_poll_run_again_after_redis_left_between_its_record_and_the_check_schedules_the_check(
    redis_client: Any, settings: Settings, fake_ov: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll recorded the commit completed with no memory; Redis went away before its
    extraction check was scheduled; ``patiently`` ran the poll again, which found the record
    final. Before, it returned there and the check was never made (a failover's lost check):
    now what follows a final record is scheduled by the run that finds it, once by its id."""
    once = settings.model_copy(update={"ov_retries": 0})
    request = running_commit(redis_client, once, fake_ov, "quiet", "hello there")
    calls = redis_away_at_the_first_check(monkeypatch)
    polled = patiently(
        request, lambda: run_poll(redis_client, context_of(once), request, deadline_at=1e12, failed_reads=0, attempt=1)
    )
    assert (polled.status, polled.memories_extracted) == ("completed", 0)
    assert len(calls) == 2  # the run again scheduled it
    scheduled = commit_queue(redis_client, once).scheduled_job_registry.get_job_ids()
    assert f"{request.commit_id}_extraction" in scheduled, scheduled
    # a poll left over finds the record final too: the check is not made twice
    run_poll(redis_client, context_of(once), request, deadline_at=1e12, failed_reads=0, attempt=2)
    assert (
        commit_queue(redis_client, once).scheduled_job_registry.get_job_ids().count(f"{request.commit_id}_extraction")
        == 1
    )
