"""One phase 2 at a time per OV tenant (workers.commits.tenant_lock).

OV 0.5.2 loses the memories of overlapping phase 2s of one user; the fake does
not reproduce that, so these tests check the ordering and the lock itself: a
second commit of the tenant reaches OV only once the first's outcome is recorded.
"""

from __future__ import annotations

from itertools import pairwise

import httpx
from rq.job import Job, JobStatus

from core.config import Settings
from core.defaults import COMMIT_TENANT_LOCK_MARGIN_S
from core.events import CommitRequest
from core.session import SessionAddress
from workers.commits import context as jobs
from workers.commits import queue as commit_queue
from workers.commits import run as commit_run
from workers.commits import tenant_lock as jobs_tenant
from workers.commits.context import context_of
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.commits.request import commit_state, request_commit
from workers.commits.run import run_commit, run_poll
from workers.commits.worker import drain_jobs
from workers.dev.fake_ov.app import FakeOV
from workers.store.connection import queue_client
from workers.store.keys import Keys


def _seed(fake: FakeOV, sid: str, api_key: str | None = None) -> None:
    headers = {"X-API-Key": api_key} if api_key else {}
    client = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov", headers=headers)
    msgs = [{"role": "user", "content": f"{sid} says hello"}, {"role": "assistant", "content": "hi"}]
    client.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": msgs}).raise_for_status()


def _request(client, settings: Settings, sid: str, user: str | None = None) -> CommitRequest:
    return request_commit(client, settings, SessionAddress(sid, "main", user), reason="compact", keep_recent_count=0)


def _commit_calls(fake: FakeOV, sid: str) -> list[int]:
    return [i for i, r in enumerate(fake.requests) if r.url.path == f"/api/v1/sessions/{sid}/commit"]


def _final(client, settings, *requests):
    def done() -> bool:
        outcomes = [CommitRecords(client, settings).outcome(r) for r in requests]
        return all(o is not None and o.status in FINAL_STATUSES for o in outcomes)

    return done


def test_a_tenants_second_commit_waits_for_the_first_outcome(redis_client, settings, fake_ov):
    _seed(fake_ov, "a")
    _seed(fake_ov, "b")
    first, second = _request(redis_client, settings, "a"), _request(redis_client, settings, "b")
    running = run_commit(redis_client, context_of(settings), first)
    assert running.status == "running" and jobs_tenant.holder(redis_client, settings, first) == first.commit_id
    lock_ttl_ms = redis_client.pttl(jobs_tenant.lock_key(settings, first))
    assert (
        settings.phase2_deadline_s * 1000
        < lock_ttl_ms
        <= (settings.phase2_deadline_s + COMMIT_TENANT_LOCK_MARGIN_S) * 1000
    )  # a dead poller's lock ends

    queue = commit_queue.commit_queue(redis_client, settings)
    jobs_before = queue.count + queue.scheduled_job_registry.count
    waiting = run_commit(redis_client, context_of(settings), second)
    assert waiting.status == "pending" and _commit_calls(fake_ov, "b") == []
    # it waits in its tenant's line: no job of its own meanwhile, yet the session's commit in flight
    inflight = Keys(settings.key_prefix).session(second.address, settings.shards).commit_inflight
    assert redis_client.hget(inflight, "job").decode() == jobs_tenant.IN_LINE
    assert queue.count + queue.scheduled_job_registry.count == jobs_before
    assert jobs_tenant.line(redis_client, settings, second) == [second.commit_id]
    assert _request(redis_client, settings, "b").commit_id == second.commit_id  # live, not resumed

    done = run_poll(
        redis_client, context_of(settings), first, deadline_at=commit_queue.now() + 30, failed_reads=0, attempt=1
    )
    # the first's final outcome handed the lock to the second, and enqueued its job
    assert done.status == "completed" and jobs_tenant.holder(redis_client, settings, first) == second.commit_id
    handed_job = redis_client.hget(inflight, "job").decode()
    assert handed_job.startswith(second.commit_id + "_turn")
    assert Job.fetch(handed_job, connection=queue_client(redis_client, settings)).get_status() == JobStatus.QUEUED
    assert jobs_tenant.line(redis_client, settings, second) == []
    reads_before = len(fake_ov.requests)
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, second))
    [call] = _commit_calls(fake_ov, "b")
    assert call >= reads_before
    assert CommitRecords(redis_client, settings).outcome(second).status == "completed"
    assert jobs_tenant.holder(redis_client, settings, second) is None


def test_queued_commits_of_one_tenant_reach_ov_one_after_another(redis_client, settings, fake_ov, monkeypatch):
    finals: dict[str, int] = {}
    record = commit_run.record_outcome

    def recording(client, s, request, outcome):
        stored = record(client, s, request, outcome)
        if stored and outcome.status in FINAL_STATUSES:
            finals[request.ov_session_id] = len(fake_ov.requests)
        return stored

    monkeypatch.setattr(commit_run, "record_outcome", recording)
    fake_ov.phase2_reads_until_done = 2  # each phase 2 answers "running" twice first
    sids = ["s1", "s2", "s3"]
    for sid in sids:
        _seed(fake_ov, sid)
    requests = [_request(redis_client, settings, sid) for sid in sids]
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, *requests))
    assert [CommitRecords(redis_client, settings).outcome(r).status for r in requests] == ["completed"] * 3
    order = sorted(sids, key=lambda sid: _commit_calls(fake_ov, sid)[0])
    for earlier, later in pairwise(order):
        assert _commit_calls(fake_ov, later)[0] >= finals[earlier], (earlier, later, finals)


def test_commits_of_different_tenants_run_together(redis_client, settings):
    keyed = FakeOV(api_keys={"key-a": ("acct", "alice"), "key-b": ("acct", "bob")})
    transport = keyed.transport()
    jobs.set_ov_transport_factory(lambda _s: transport)
    try:
        two = settings.model_copy(update={"user_api_keys": {"alice": "key-a", "bob": "key-b"}})
        _seed(keyed, "shared", "key-a")
        _seed(keyed, "shared", "key-b")
        alice, bob = _request(redis_client, two, "shared", "alice"), _request(redis_client, two, "shared", "bob")
        assert jobs_tenant.tenant_of(two, "alice") != jobs_tenant.tenant_of(two, "bob")
        assert run_commit(redis_client, context_of(two), alice).status == "running"
        assert run_commit(redis_client, context_of(two), bob).status == "running"
        assert drain_jobs(redis_client, two, until=_final(redis_client, two, alice, bob))
    finally:
        jobs.set_ov_transport_factory(None)


def test_a_lock_left_by_a_finished_commit_is_taken(redis_client, settings, fake_ov, monkeypatch):
    _seed(fake_ov, "a")
    _seed(fake_ov, "b")
    first, second = _request(redis_client, settings, "a"), _request(redis_client, settings, "b")
    assert run_commit(redis_client, context_of(settings), first).status == "running"
    with monkeypatch.context() as m:  # the poller dies between recording the outcome and handing on
        m.setattr(jobs_tenant, "hand_on", lambda *a: None)
        run_poll(
            redis_client, context_of(settings), first, deadline_at=commit_queue.now() + 30, failed_reads=0, attempt=1
        )
    assert jobs_tenant.holder(redis_client, settings, first) == first.commit_id
    assert run_commit(redis_client, context_of(settings), second).status == "running"
    assert jobs_tenant.holder(redis_client, settings, second) == second.commit_id


def test_a_commit_failing_in_ov_releases_the_lock(redis_client, settings, fake_ov):
    _seed(fake_ov, "b")
    missing = _request(redis_client, settings, "never-created")  # OV answers 404: recorded as failed
    assert run_commit(redis_client, context_of(settings), missing).status == "failed"
    assert jobs_tenant.holder(redis_client, settings, missing) is None
    assert run_commit(redis_client, context_of(settings), _request(redis_client, settings, "b")).status == "running"


def test_a_tenants_burst_of_commits_spends_no_job_on_waiting(redis_client, settings, fake_ov, monkeypatch):
    """50 sessions of one tenant ask at once: each commit job runs once (the lock is handed on,
    never polled), phase 2s never overlap, and they run in the order they were asked."""
    runs: list[str] = []
    run = commit_run.run_commit

    def counted(client, ctx, request, **kw):
        runs.append(request.commit_id)
        return run(client, ctx, request, **kw)

    monkeypatch.setattr(commit_run, "run_commit", counted)
    sids = [f"burst-{i:02d}" for i in range(50)]
    for sid in sids:
        _seed(fake_ov, sid)
    requests = [_request(redis_client, settings, sid) for sid in sids]
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, *requests), timeout_s=120)
    assert [CommitRecords(redis_client, settings).outcome(r).status for r in requests] == ["completed"] * 50
    assert sorted(runs) == sorted(r.commit_id for r in requests)  # one commit job each: no waiting job
    order = sorted(sids, key=lambda s: _commit_calls(fake_ov, s)[0])
    assert order == sids  # OV saw the commits in the order they were asked
    assert jobs_tenant.line(redis_client, settings, requests[0]) == []
    assert jobs_tenant.holder(redis_client, settings, requests[0]) is None


def _three_of_one_tenant(redis_client, settings, fake_ov) -> tuple[CommitRequest, ...]:
    """Three commits of one tenant asked for at once: the first runs, two wait in line."""
    for sid in ("a", "b", "c"):
        _seed(fake_ov, sid)
    first, second, third = (_request(redis_client, settings, sid) for sid in ("a", "b", "c"))
    ctx = context_of(settings)
    assert run_commit(redis_client, ctx, first).status == "running"
    assert run_commit(redis_client, ctx, second).status == "pending"
    assert run_commit(redis_client, ctx, third).status == "pending"
    return first, second, third


def test_a_line_whose_holder_vanished_is_resumed_by_the_sweep(redis_client, settings, fake_ov):
    first, second, third = _three_of_one_tenant(redis_client, settings, fake_ov)
    assert commit_state(redis_client, settings, second, jobs_tenant.IN_LINE)[0] == "live"
    redis_client.delete(jobs_tenant.lock_key(settings, first))  # its lock expired with its poller
    assert commit_state(redis_client, settings, second, jobs_tenant.IN_LINE)[0] == "lost"
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, first, second, third))
    assert [CommitRecords(redis_client, settings).outcome(r).status for r in (first, second, third)] == [
        "completed"
    ] * 3


def test_a_commit_ended_while_in_line_leaves_it(redis_client, settings, fake_ov):
    first, second, third = _three_of_one_tenant(redis_client, settings, fake_ov)
    ctx = context_of(settings)
    commit_run.finish_commit(redis_client, settings, second, "failed", error="given up")
    assert jobs_tenant.line(redis_client, settings, first) == [third.commit_id]
    run_poll(redis_client, ctx, first, deadline_at=commit_queue.now() + 30, failed_reads=0, attempt=1)
    assert jobs_tenant.holder(redis_client, settings, first) == third.commit_id
