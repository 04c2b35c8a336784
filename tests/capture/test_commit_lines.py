"""The commit queue's lines on a real redis-server (workers.commits.lines, issue 58): a
tenant's burst does not hold another tenant's job back, a tenant's urgent job goes before its
background ones, what an earlier release queued on the queue's own list is drained, a worker
blocked before a line existed takes its job (the doorbell), a job on a line no worker reads is
stranded (the sweep's), and idle empty lines are forgotten."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from rq import get_current_job
from rq.job import Job

from core.events import CommitReason, CommitRequest
from core.fairness import line_of
from tests.helpers.waiting import wait_until
from workers.commits.lines import LINE_IDLE_S, line_of_job
from workers.commits.queue import commit_lines, commit_queue, job_state
from workers.commits.schedule import schedule_extraction_check
from workers.commits.scheduler import move_due_jobs
from workers.commits.worker import make_worker
from workers.store.connection import queue_client, text
from workers.store.keys import Keys

pytestmark = pytest.mark.redis

RAN = "tests:commit-lines:ran"


def ran(tag: str) -> None:
    """The job: says it ran (a list on the queue's Redis, named by the test's prefix)."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(f"{RAN}:{job.meta['prefix']}", tag)


def _put(redis_client: Any, settings: Any, tenant: str, reason: str, tag: str) -> Job:
    return commit_lines(redis_client, settings).enqueue(
        line_of(tenant, reason), ran, tag, meta={"prefix": settings.key_prefix}
    )


def _ran(redis_client: Any, settings: Any) -> list[str]:
    return [text(t) for t in queue_client(redis_client, settings).lrange(f"{RAN}:{settings.key_prefix}", 0, -1)]


def test_a_burst_of_one_tenant_does_not_hold_another_back(redis_client, settings) -> None:
    for i in range(20):
        _put(redis_client, settings, "tenant-a", "threshold", f"a-background-{i}")
    _put(redis_client, settings, "tenant-a", "compact", "a-urgent")
    _put(redis_client, settings, "tenant-b", "compact", "b-urgent")
    # and one queued the way an earlier release did: on the queue's own list, no line
    commit_queue(redis_client, settings).enqueue(ran, "legacy", meta={"prefix": settings.key_prefix})
    assert commit_lines(redis_client, settings).queued() == 23
    make_worker(redis_client, settings, embedded=True).work(burst=True)
    order = _ran(redis_client, settings)
    assert sorted(order) == sorted([*(f"a-background-{i}" for i in range(20)), "a-urgent", "b-urgent", "legacy"])
    # three tenants (A, B, the legacy line) in turn: each one's first job in the first three
    assert set(order[:3]) == {"a-urgent", "b-urgent", "legacy"}, order
    # A's background jobs in the order they were queued
    assert [t for t in order if t.startswith("a-background")] == [f"a-background-{i}" for i in range(20)]
    assert commit_lines(redis_client, settings).queued() == 0


def test_a_worker_blocked_before_a_line_existed_takes_its_job(redis_client, settings) -> None:
    worker = make_worker(redis_client, settings, embedded=True)
    thread = threading.Thread(target=lambda: worker.work(max_jobs=1), daemon=True)
    thread.start()
    # the worker reads the lines (none yet) and blocks for RQ's dequeue timeout (minutes)
    wait_until(lambda: worker.get_state() == "idle", "the worker waits for jobs", timeout_s=30)
    _put(redis_client, settings, "tenant-new", "compact", "new-line")
    wait_until(lambda: _ran(redis_client, settings) == ["new-line"], "the job of a line new to the worker ran")
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_job_on_a_line_no_worker_reads_is_stranded(redis_client, settings) -> None:
    job = _put(redis_client, settings, "tenant-a", "threshold", "x")
    lines = commit_lines(redis_client, settings)
    assert job_state(redis_client, settings, job.id)[0] == "live" and lines.holds(job)
    queue_client(redis_client, settings).zrem(Keys(settings.key_prefix).commit_lines(), line_of_job(job))
    assert job_state(redis_client, settings, job.id)[0] == "stranded"
    lines.remove(job)
    assert lines.queued() == 0 and not lines.holds(job)
    # moved onto the queue's own list (an earlier release's worker moves due jobs there): read
    commit_queue(redis_client, settings).push_job_id(job.id)
    assert lines.holds(job) and job_state(redis_client, settings, job.id)[0] == "live"


def test_idle_empty_lines_are_forgotten_and_busy_ones_kept(redis_client, settings) -> None:
    busy = _put(redis_client, settings, "tenant-a", "threshold", "waits")
    _put(redis_client, settings, "tenant-b", "threshold", "runs")
    lines = commit_lines(redis_client, settings)
    lines.remove(Job.fetch(lines.job_ids()[-1], connection=lines.connection))  # b's line empties
    assert lines.forget_idle() == 0  # both used just now
    old = time.time() - LINE_IDLE_S - 1
    registry = Keys(settings.key_prefix).commit_lines()
    lines.connection.zadd(registry, dict.fromkeys(lines.lines(), old))
    assert lines.forget_idle() == 1
    assert lines.lines() == [line_of_job(busy)]


def _request(commit_id: str, session: str, reason: CommitReason) -> CommitRequest:
    return CommitRequest(
        commit_id=commit_id,
        ov_session_id=session,
        agent_id="main",
        user="tenant-a",
        reason=reason,
        keep_recent_count=0,
        generation=1,
        requested_at=time.time(),
    )


def test_a_due_follow_up_job_goes_on_its_tenants_background_line(redis_client, settings) -> None:
    """A look after the commit (an extraction check, a recheck, a repair) is background work
    of its tenant, whatever the commit's urgency; phase-2 reads are no jobs (the due set)."""
    urgent, background = _request("c1", "s1", "compact"), _request("c2", "s2", "threshold")
    for request in (urgent, background):
        schedule_extraction_check(redis_client, settings, request)
    queue = commit_queue(redis_client, settings)
    registry = queue.scheduled_job_registry
    queue.connection.zadd(registry.key, dict.fromkeys(registry.get_job_ids(), 0))  # due now
    assert move_due_jobs(redis_client, settings) == 2
    lines = commit_lines(redis_client, settings)
    assert lines.lines() == [line_of("tenant-a", None)]
    for job_id in lines.job_ids():
        job = Job.fetch(job_id, connection=lines.connection)
        assert job.origin == settings.commit_queue_name  # RQ's registries stay the queue's
        assert line_of_job(job) == line_of("tenant-a", None)
