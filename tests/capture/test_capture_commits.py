"""Threshold commits, the RQ jobs, the phase-2 poller and ``ovstream commits``."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import httpx
import pytest
from rq.job import Job

from core.config import Settings
from core.events import CommitRequest
from core.ov.client import OVError
from core.ov.tasks import memories_extracted
from core.session import SessionAddress
from tests.helpers.capture import cli_uses, make_worker, ov_texts, publish, stored_snapshot, turn
from workers.cli import main
from workers.commits import context as jobs
from workers.commits import queue as commit_queue
from workers.commits.context import context_of
from workers.commits.lines import line_of_request
from workers.commits.records import CommitRecords
from workers.commits.request import request_commit, wait_commit_outcome
from workers.commits.run import run_commit, run_poll, run_recheck
from workers.commits.scheduler import move_due_jobs
from workers.commits.worker import drain_jobs, jobs_waiting
from workers.commits.worker import make_worker as make_commit_worker
from workers.store.connection import queue_client
from workers.store.keys import Keys

FINAL = ("completed", "failed", "timeout", "skipped")


def _final(client, settings: Settings, request: CommitRequest):
    return lambda: (o := CommitRecords(client, settings).outcome(request)) is not None and o.status in FINAL


def _request(client, settings, sid="s", **kw) -> CommitRequest:
    kw.setdefault("reason", "compact")
    kw.setdefault("keep_recent_count", 0)
    return request_commit(client, settings, SessionAddress(sid, "main", None), **kw)


def _seed(fake, sid: str, n: int = 4, text: str = "hello there") -> None:
    transport = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov")
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{text} {i}"} for i in range(n)]
    transport.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": msgs}).raise_for_status()


async def test_threshold_crossings_enqueue_one_commit_until_it_finishes(redis_client, settings, fake_ov):
    low = settings.model_copy(update={"commit_token_threshold": 3, "commit_keep_recent_count": 2})
    for t in range(4):  # each burst is one batch over the threshold while the commit waits in RQ
        publish(redis_client, low, [turn("busy", t)])
        worker = make_worker(low, fake_ov, burst=True)
        await worker.run()
        assert worker.stats.commits_requested == 1
    [pending] = CommitRecords(redis_client, low).list(SessionAddress("busy", "main", None))
    assert pending.status == "pending" and pending.reason == "threshold"
    assert jobs_waiting(redis_client, low) == 1

    assert drain_jobs(redis_client, low, until=_final(redis_client, low, _as_request(pending)))
    [done] = CommitRecords(redis_client, low).list(SessionAddress("busy", "main", None))
    assert done.status == "completed" and done.archived and done.task_id
    [commit_call] = [r for r in fake_ov.requests if r.url.path.endswith("/commit")]
    assert json.loads(commit_call.content) == {"keep_recent_count": 2, "enable_working_memory": True}

    # a finished commit does not block the next one
    publish(redis_client, low, [turn("busy", t) for t in range(4, 8)])
    await make_worker(low, fake_ov, burst=True).run()
    first, second = CommitRecords(redis_client, low).list(SessionAddress("busy", "main", None))
    assert first.commit_id != second.commit_id and second.status == "pending"
    assert drain_jobs(redis_client, low, until=_final(redis_client, low, _as_request(second)))
    assert [o.status for o in CommitRecords(redis_client, low).list(SessionAddress("busy", "main", None))] == [
        "completed",
        "completed",
    ]
    assert len(ov_texts(fake_ov, "busy")) == 16  # archived ones included: nothing lost


def _as_request(outcome) -> CommitRequest:
    return CommitRequest(
        commit_id=outcome.commit_id,
        ov_session_id=outcome.ov_session_id,
        agent_id=outcome.agent_id,
        user=outcome.user,
        reason=outcome.reason,
        keep_recent_count=0,
        generation=0,
        requested_at=outcome.requested_at,
    )


def test_a_second_request_returns_the_one_in_flight(redis_client, settings, fake_ov):
    _seed(fake_ov, "s")
    first = _request(redis_client, settings)
    again = _request(redis_client, settings, reason="memory_store")
    assert again.commit_id == first.commit_id and again.reason == "compact"
    assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789_-" for c in first.commit_id.lower())
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, first))
    nxt = _request(redis_client, settings)
    assert nxt.generation == first.generation + 1 and nxt.commit_id != first.commit_id


def test_poller_records_completed_with_the_memory_count(redis_client, settings, fake_ov):
    fake_ov.phase2_reads_until_done = 3
    _seed(fake_ov, "s", text="remember that I prefer tea")
    request = _request(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, request))
    outcome = CommitRecords(redis_client, settings).outcome(request)
    assert outcome.status == "completed" and outcome.memories_extracted == 2
    assert outcome.finished_at and outcome.archive_uri.endswith("archive_001")
    stream = redis_client.xrange(Keys(settings.key_prefix).commit_outcomes())
    assert [json.loads(f[b"o"])["status"] for _, f in stream] == ["completed"]


def test_poller_records_a_failed_phase2(redis_client, settings, fake_ov):
    fake_ov.phase2 = "fail"
    _seed(fake_ov, "s")
    request = _request(redis_client, settings)
    outcome = wait_for_outcome(redis_client, settings, request)
    assert outcome.status == "failed" and "memory extraction failed" in outcome.error


@pytest.mark.parametrize("embedded", [True, False])
def test_commit_workers_open_no_pubsub_channel(redis_client, settings, embedded):
    """An RQ worker that unsubscribes waits up to 60 s for redis-py 8.1's pubsub thread (a stalled
    burst round, a SIGTERM honoured a minute late): ovstream's workers listen on no channel."""
    worker = make_commit_worker(redis_client, settings, embedded=embedded)
    for _ in range(3):
        worker.work(burst=True, logging_level="WARNING")
        assert worker.pubsub_thread is None and worker.pubsub is None
    clients = redis_client.client_list()
    assert not [c for c in clients if int(c.get("sub", 0)) or int(c.get("psub", 0))], clients


def wait_for_outcome(client, settings, request):
    assert drain_jobs(client, settings, until=_final(client, settings, request))
    return CommitRecords(client, settings).outcome(request)


def test_poller_records_a_timeout_past_the_deadline(redis_client, settings, fake_ov):
    now = [1_000.0]
    commit_queue.set_clock(lambda: now[0])
    fake_ov.phase2 = "hang"
    _seed(fake_ov, "s")
    request = _request(redis_client, settings)
    running = run_commit(redis_client, context_of(settings), request)
    assert running.status == "running" and running.task_id
    deadline = now[0] + settings.phase2_deadline_s
    now[0] += settings.phase2_deadline_s - 1
    assert (
        run_poll(redis_client, context_of(settings), request, deadline_at=deadline, failed_reads=0, attempt=1).status
        == "running"
    )
    now[0] += 2
    outcome = run_poll(redis_client, context_of(settings), request, deadline_at=deadline, failed_reads=0, attempt=2)
    assert outcome.status == "timeout" and outcome.finished_at == now[0]
    assert (
        run_poll(redis_client, context_of(settings), request, deadline_at=deadline, failed_reads=0, attempt=3).status
        == "timeout"
    )  # the first final outcome stands


@pytest.mark.parametrize("failures", [2, 3, 8])
def test_failed_task_reads_never_fail_a_commit_that_ov_completes(redis_client, settings, fake_ov, failures):
    once = settings.model_copy(update={"ov_retries": 0})  # one HTTP attempt per read
    _seed(fake_ov, "s")
    request = _request(redis_client, once)
    fake_ov.fail_next(failures, status=503, route="/api/v1/tasks/")
    outcome = wait_for_outcome(redis_client, once, request)
    assert outcome.status == "completed" and outcome.memories_extracted is not None


def test_a_timeout_is_corrected_when_ov_reports_the_task_completed(redis_client, settings, fake_ov):
    """OV restarts mid-phase-2: every read fails past the deadline (timeout); a later recheck
    finds the task completed and the record ends matching OV."""
    now = [1_000.0]
    commit_queue.set_clock(lambda: now[0])
    once = settings.model_copy(update={"ov_retries": 0})
    _seed(fake_ov, "s")
    request = _request(redis_client, once)
    running = run_commit(redis_client, context_of(once), request)
    assert running.status == "running" and running.task_id
    deadline = now[0] + once.phase2_deadline_s
    fake_ov.fail_next(50, status=503, route="/api/v1/tasks/")  # OV is down
    now[0] = deadline + 1
    timed_out = run_poll(redis_client, context_of(once), request, deadline_at=deadline, failed_reads=4, attempt=1)
    assert timed_out.status == "timeout" and "task reads failed" in timed_out.error
    assert run_recheck(redis_client, context_of(once), request, round_=0).status == "timeout"  # still down
    fake_ov._failures.clear()  # OV is back
    corrected = run_recheck(redis_client, context_of(once), request, round_=1)
    assert corrected.status == "completed" and corrected.task_id == running.task_id
    assert CommitRecords(redis_client, once).outcome(request).status == "completed"
    stream = redis_client.xrange(Keys(once.key_prefix).commit_outcomes())
    assert [json.loads(f[b"o"])["status"] for _, f in stream][-2:] == ["timeout", "completed"]
    assert run_recheck(redis_client, context_of(once), request, round_=2).status == "completed"  # nothing left to do


def test_commit_with_nothing_to_archive_is_skipped(redis_client, settings, fake_ov):
    httpx.Client(transport=httpx.MockTransport(fake_ov.handle), base_url="http://ov").post(
        "/api/v1/sessions", json={"session_id": "empty"}
    )  # a session with no messages
    request = _request(redis_client, settings, sid="empty")
    outcome = wait_for_outcome(redis_client, settings, request)
    assert outcome.status == "skipped" and "no_messages" in outcome.error


def test_a_task_answering_skipped_is_recorded_as_skipped(redis_client, settings, fake_ov):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/v1/tasks/"):
            return httpx.Response(200, json={"status": "ok", "result": {"task_id": "t", "status": "skipped"}})
        return fake_ov.handle(request)

    transport = httpx.MockTransport(handler)
    jobs.set_ov_transport_factory(lambda _s: transport)
    _seed(fake_ov, "s")
    assert wait_for_outcome(redis_client, settings, _request(redis_client, settings)).status == "skipped"


def test_wait_gives_a_timeout_outcome_when_nothing_runs_the_job(redis_client, settings, fake_ov):
    request = _request(redis_client, settings)
    outcome = wait_commit_outcome(redis_client, settings, request, timeout_s=0.1)
    assert outcome.status == "timeout" and "still pending" in outcome.error
    assert CommitRecords(redis_client, settings).outcome(request).status == "pending"  # not recorded


def test_a_lost_commit_job_is_enqueued_again(redis_client, settings, fake_ov):
    _seed(fake_ov, "s")
    request = _request(redis_client, settings)
    # as if the enqueue never happened: no job, and its id on no line
    Job.fetch(request.commit_id, connection=queue_client(redis_client, settings)).delete()
    commit_queue.commit_lines(redis_client, settings).queue(line_of_request(request)).remove(request.commit_id)
    assert jobs_waiting(redis_client, settings) == 0
    assert _request(redis_client, settings).commit_id == request.commit_id
    assert wait_for_outcome(redis_client, settings, request).status == "completed"


def test_memories_extracted_reads_every_known_shape():
    assert memories_extracted({"memories_extracted": {"memory_write": 2, "memory_edit": 1}}) == 3
    assert memories_extracted({"memories_extracted": {}}) == 0
    assert memories_extracted({"memories_extracted": {"total": 4, "preferences": 4}}) == 4
    assert memories_extracted({"memories_extracted": 5}) == 5
    assert memories_extracted({"memory_uris": ["a", "b"]}) == 2
    assert memories_extracted(None) is None and memories_extracted({}) is None


def test_commit_snapshot_shows_the_archive_overview(redis_client, settings, fake_ov):

    _seed(fake_ov, "s")
    request = _request(redis_client, settings)
    assert wait_for_outcome(redis_client, settings, request).status == "completed"
    snap = stored_snapshot(redis_client, settings, SessionAddress("s", "main", None))
    assert snap is not None and snap.latest_archive_overview and snap.total_archives == 1


def test_ovstream_commits_finds_the_agent_the_session_key_names(redis_client, settings, monkeypatch, capsys):
    """Typed as the README shows (the session id alone), it finds the commits of the session
    under the agent its key named, and says which."""
    cli_uses(monkeypatch, settings)
    request = request_commit(
        redis_client, settings, SessionAddress("demo-sid[1]", "demo", None), reason="manual", keep_recent_count=0
    )
    assert main(["commits", "demo-sid[1]"]) == 0
    out = capsys.readouterr().out
    assert "session demo-sid[1] (agent demo): 1 commit(s)" in out and request.commit_id in out
    assert main(["commits", "demo-sid[1]", "--agent", "main"]) == 0  # asked for another: that one only
    assert "no commits recorded for session demo-sid[1] (agent main; --session-key or --agent" in (
        capsys.readouterr().out
    )


def test_ovstream_commits_prints_the_table(redis_client, settings, fake_ov, monkeypatch, capsys):
    cli_uses(monkeypatch, settings)
    assert main(["commits", "nothing-here"]) == 0
    assert "no commits recorded for session nothing-here" in capsys.readouterr().out

    fake_ov.phase2 = "fail"
    _seed(fake_ov, "s")
    failed = _request(redis_client, settings)
    wait_for_outcome(redis_client, settings, failed)
    fake_ov.phase2 = "complete"
    _seed(fake_ov, "s")
    done = _request(redis_client, settings, reason="manual")
    wait_for_outcome(redis_client, settings, done)
    assert main(["commits", "s", "--agent", "main"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "session s (agent main): 2 commit(s)"
    assert out[1].split()[:3] == ["COMMIT", "REASON", "STATUS"]
    assert out[2].split()[:3] == [failed.commit_id, "compact", "failed"]
    assert out[3].split()[:3] == [done.commit_id, "manual", "completed"]
    assert "archive_001" in out[2] and "archive_002" in out[3]


def test_two_deployments_on_one_redis_both_commit_the_same_session_id(redis_client, settings, fake_ov):
    other = settings.model_copy(update={"key_prefix": f"{settings.key_prefix}-b"})
    assert settings.commit_queue_name != other.commit_queue_name
    _seed(fake_ov, "shared")
    first, second = _request(redis_client, settings, "shared"), _request(redis_client, other, "shared")
    assert first.commit_id != second.commit_id  # RQ's job ids are global to the Redis
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, first))
    assert CommitRecords(redis_client, settings).outcome(first).status == "completed"
    _seed(fake_ov, "shared")  # new messages for the second deployment's commit to archive
    assert drain_jobs(redis_client, other, until=_final(redis_client, other, second))
    assert CommitRecords(redis_client, other).outcome(second).status == "completed"


def test_due_jobs_move_with_an_orphaned_rq_scheduler_lock_and_exactly_once(redis_client, settings):
    """A SIGKILLed worker leaves RQ's scheduler lock behind; the polls must move anyway,
    each once however many workers move at the same moment."""
    queue = commit_queue.commit_queue(redis_client, settings)
    queue.connection.set(f"rq:scheduler-lock:{queue.name}", "dead-worker", ex=60)
    for i in range(40):
        queue.enqueue_in(timedelta(seconds=0), "builtins.print", i, job_id=f"{settings.key_prefix}-due-{i}")
    moved: list[int] = []
    threads = [threading.Thread(target=lambda: moved.append(move_due_jobs(redis_client, settings))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(moved) == 40 and queue.count == 40
    assert sorted(queue.job_ids) == sorted(f"{settings.key_prefix}-due-{i}" for i in range(40))
    assert queue.scheduled_job_registry.count == 0


async def test_a_snapshot_that_cannot_be_refreshed_after_a_commit_is_dropped(redis_client, settings, fake_ov):
    # Capture stores a snapshot (and would grow it); the commit then changes OV under it.
    publish(redis_client, settings, [turn("s", 0), turn("s", 1)])
    await make_worker(settings, fake_ov, burst=True).run()
    address = SessionAddress("s", "main", None)
    assert stored_snapshot(redis_client, settings, address) is not None
    fake_ov.fail_next(100, status=500, code="INTERNAL", route="get_context")  # every read (and retry) after it fails
    request = _request(redis_client, settings)
    assert wait_for_outcome(redis_client, settings, request).status == "completed"
    # Never the pre-commit snapshot: the next reader goes to OV (and capture reads, not grows).
    assert stored_snapshot(redis_client, settings, address) is None


OVS_OWN_TROUBLE = {
    "server-error": (500, "INTERNAL", None),
    # OV 0.5.2 maps the JSONDecodeError of its .meta.json, read empty mid-write, to a 400
    "own-file-mid-write": (400, "INVALID_ARGUMENT", "Expecting value: line 1 column 1 (char 0)"),
}


@pytest.mark.parametrize("trouble", OVS_OWN_TROUBLE.values(), ids=OVS_OWN_TROUBLE.keys())
@pytest.mark.parametrize("took_it", [False, True], ids=["before-ov-took-it", "after-ov-took-it"])
def test_a_commit_ov_answers_a_server_error_is_tried_again_and_made_once(
    redis_client, settings, fake_ov, took_it, trouble
):
    """OV 0.5.2 can answer a commit with trouble of its own (reading its session's metadata
    while another write rewrites it: "Expecting value", a 400 as the chaos tier met it in CI).
    RQ tries the job again; OV's commit count says whether the first try was taken, so the
    session is committed exactly once."""
    status, code, message = trouble
    once = settings.model_copy(update={"ov_retries": 0})
    _seed(fake_ov, "s")
    request = _request(redis_client, once)
    fake_ov.fail_next(1, status=status, code=code, route="commit", after=took_it, message=message)
    with pytest.raises(OVError, match=code):
        run_commit(redis_client, context_of(once), request, may_retry=True)
    assert CommitRecords(redis_client, once).outcome(request).status == "running"  # not failed: tried again
    retried = run_commit(redis_client, context_of(once), request, may_retry=True)
    assert retried.status == "running" and retried.task_id
    assert fake_ov.sessions["s"].commit_count == 1 and len(fake_ov.sessions["s"].archives) == 1
    assert wait_for_outcome(redis_client, once, request).status == "completed"


def test_a_commit_ov_answers_a_server_error_on_its_last_try_is_failed(redis_client, settings, fake_ov):
    _seed(fake_ov, "s")
    request = _request(redis_client, settings)
    fake_ov.fail_next(1, status=500, code="INTERNAL", route="commit")
    failed = run_commit(redis_client, context_of(settings), request, may_retry=False)
    assert failed.status == "failed" and "INTERNAL" in failed.error


def test_a_commit_ov_refuses_for_its_arguments_is_failed_at_once(redis_client, settings, fake_ov):
    """A 400 of the request's own (not OV's file read mid-write) would be refused again."""
    _seed(fake_ov, "s")
    request = _request(redis_client, settings)
    fake_ov.fail_next(1, status=400, code="INVALID_ARGUMENT", route="commit", message="keep_recent_count < 0")
    failed = run_commit(redis_client, context_of(settings), request, may_retry=True)
    assert failed.status == "failed" and "keep_recent_count" in failed.error
