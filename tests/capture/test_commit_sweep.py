"""The sweep of in-flight commits (workers.commits.sweep): a commit whose job died with
its worker, or was stranded on its way, is resumed once, and completes; a live one is left."""

from __future__ import annotations

import logging

import httpx
from rq.job import Job, JobStatus

from core.session import SessionAddress
from workers.commits import sweep as commit_sweep
from workers.commits.queue import commit_lines
from workers.commits.records import CommitRecords
from workers.commits.request import request_commit, resume
from workers.commits.worker import drain_jobs
from workers.store.connection import queue_client
from workers.store.keys import Keys


def _seed(fake, sid: str) -> None:
    client = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov")
    msgs = [{"role": "user", "content": f"fact {i}"} for i in range(4)]
    client.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": msgs}).raise_for_status()


def _commit(redis_client, settings, fake, sid: str):
    _seed(fake, sid)
    request = request_commit(
        redis_client, settings, SessionAddress(sid, "main", None), reason="compact", keep_recent_count=0
    )
    return request, Job.fetch(request.commit_id, connection=queue_client(redis_client, settings))


def _started_by(redis_client, settings, job: Job, worker_name: str) -> None:
    """As if ``worker_name`` had taken the job off the queue and started it."""
    commit_lines(redis_client, settings).remove(job)
    job.worker_name = worker_name
    job.set_status(JobStatus.STARTED)
    job.save()


def _make_due(redis_client, settings) -> None:
    index = Keys(settings.key_prefix).commits_in_flight()
    redis_client.zadd(index, dict.fromkeys(redis_client.zrange(index, 0, -1), 0))


def _finish(redis_client, settings, request) -> str:
    records = CommitRecords(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=lambda: records.outcome(request).status == "completed")
    return records.outcome(request).status


def test_a_job_started_by_a_dead_worker_is_resumed_and_the_commit_completes(redis_client, settings, fake_ov):
    request, job = _commit(redis_client, settings, fake_ov, "orphan")
    _started_by(redis_client, settings, job, "dead-worker")  # which then died: no heartbeat
    _make_due(redis_client, settings)
    assert commit_sweep.sweep(redis_client, settings) == 1
    assert _finish(redis_client, settings, request) == "completed"
    assert len(fake_ov.sessions["orphan"].archives) == 1  # committed once in OV
    _make_due(redis_client, settings)
    assert commit_sweep.sweep(redis_client, settings) == 0
    assert redis_client.zcard(Keys(settings.key_prefix).commits_in_flight()) == 0  # finished: unindexed


def test_a_commit_found_lost_by_two_processes_at_once_is_resumed_once(redis_client, settings, fake_ov, caplog):
    # the sweep (a worker) and a capture process asking for the session's next commit read the
    # same lost job before either resumes it: one resumes, the other finds it taken
    request, job = _commit(redis_client, settings, fake_ov, "found-twice")
    _started_by(redis_client, settings, job, "dead-worker")
    outcome = CommitRecords(redis_client, settings).outcome(request)
    resume(redis_client, settings, request, outcome, job=job.id)
    resume(redis_client, settings, request, outcome, job=job.id)  # read before the first resumed it
    again = [j for j in commit_lines(redis_client, settings).job_ids() if j.startswith(request.commit_id + "_again")]
    assert len(again) == 1, again
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"commit {request.commit_id}: its job {job.id} is lost; enqueueing it again"
    ]
    assert _finish(redis_client, settings, request) == "completed"
    assert len(fake_ov.sessions["found-twice"].archives) == 1


def test_a_job_of_a_live_worker_is_left_alone(redis_client, settings, fake_ov):
    _, job = _commit(redis_client, settings, fake_ov, "busy")
    _started_by(redis_client, settings, job, "live-worker")
    commit_sweep.beat(redis_client, settings, "live-worker")
    _make_due(redis_client, settings)
    assert commit_sweep.sweep(redis_client, settings) == 0


def test_a_stranded_job_is_resumed_at_the_second_look(redis_client, settings, fake_ov, caplog):
    request, job = _commit(redis_client, settings, fake_ov, "stranded")
    commit_lines(redis_client, settings).remove(job)  # dequeued by a worker that stopped before starting it
    _make_due(redis_client, settings)
    assert commit_sweep.sweep(redis_client, settings) == 0  # maybe on its way: not yet
    _make_due(redis_client, settings)
    with caplog.at_level(logging.INFO, logger="workers.commits.request"):
        assert commit_sweep.sweep(redis_client, settings) == 1
    # nothing was lost (a worker stopping for an upgrade does this): said, not warned
    said = [r for r in caplog.records if "is stranded; enqueueing it again" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO], caplog.text
    assert _finish(redis_client, settings, request) == "completed"
    assert len(fake_ov.sessions["stranded"].archives) == 1


def test_a_commit_ov_took_before_its_worker_died_is_adopted_not_sent_again(redis_client, settings, fake_ov):
    from workers.commits.records import outcome_of
    from workers.commits.run import record_outcome

    request, job = _commit(redis_client, settings, fake_ov, "taken")
    # the dead worker's last steps: "running" recorded, OV's commit answered, then SIGKILL
    record_outcome(redis_client, settings, request, outcome_of(request, "running", ov_commits_before=0))
    client = httpx.Client(transport=httpx.MockTransport(fake_ov.handle), base_url="http://ov")
    task_id = client.post("/api/v1/sessions/taken/commit", json={"keep_recent_count": 0}).json()["result"]["task_id"]
    _started_by(redis_client, settings, job, "dead-worker")
    _make_due(redis_client, settings)
    assert commit_sweep.sweep(redis_client, settings) == 1
    assert _finish(redis_client, settings, request) == "completed"
    assert len(fake_ov.sessions["taken"].archives) == 1  # not committed a second time
    outcome = CommitRecords(redis_client, settings).outcome(request)
    assert outcome.task_id == task_id and outcome.archive_uri.endswith("/archive_001")
