"""Phase-2 reads as entries of the due set (workers.commits.phase2_due, workers.commits.poller),
on a real Redis with the fake OV: no RQ job per read, each claimed by one poller, a lapsed
claim read again, a lost entry put back by the sweep, and nothing left behind."""

from __future__ import annotations

import time

import pytest

from tests.helpers.commits import redis_away_at_the_first_check, running_commit
from workers.commits import phase2_due
from workers.commits import sweep as commit_sweep
from workers.commits.context import context_of
from workers.commits.phase2_due import POLL_FIELD, POLLING, claim_due, due_reads, poll_state, settle
from workers.commits.poller import run_due_polls
from workers.commits.queue import commit_queue, job_counts
from workers.commits.records import CommitRecords
from workers.commits.run import read_phase2, run_poll
from workers.commits.worker import drain_jobs
from workers.store.keys import Keys, session_keys


def _running(redis_client, settings, fake, sid: str, *, reads_running: int = 2):
    """A commit OV took (phase 1), its phase 2 answering "running" to ``reads_running`` reads."""
    fake.phase2_reads_until_done = reads_running
    return running_commit(redis_client, settings, fake, sid, "remember that I prefer tea")


def _due_now(redis_client, settings) -> None:
    due = Keys(settings.key_prefix).phase2_due()
    redis_client.zadd(due, dict.fromkeys(redis_client.zrange(due, 0, -1), 0))


def _task_reads(fake) -> int:
    return sum(1 for r in fake.requests if r.url.path.startswith("/api/v1/tasks/"))


def test_a_commits_phase_2_is_read_from_the_due_set_with_no_rq_job_per_read(redis_client, settings, fake_ov):
    request = _running(redis_client, settings, fake_ov, "due")
    inflight = session_keys(settings, request.address).commit_inflight
    assert redis_client.hget(inflight, "job").decode() == POLLING
    assert job_counts(redis_client, settings)["polling"] == 1
    records = CommitRecords(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=lambda: records.outcome(request).status == "completed")
    assert records.outcome(request).memories_extracted == 1  # the fake OV's one preference
    assert _task_reads(fake_ov) == 3  # "running" twice, then completed: every read made, once
    queue = commit_queue(redis_client, settings)
    assert queue.finished_job_registry.get_job_ids() == [request.commit_id]  # the commit its only job
    assert queue.scheduled_job_registry.count == 0
    assert due_reads(redis_client, settings) == 0 and not redis_client.exists(inflight)  # nothing left


def test_each_due_read_is_claimed_by_one_poller(redis_client, settings, fake_ov):
    for sid in ("a", "b", "c"):
        _running(redis_client, settings, fake_ov, sid)
    _due_now(redis_client, settings)
    first, _ = claim_due(redis_client, settings)
    second, _ = claim_due(redis_client, settings)
    assert len(first) == 3 and second == []  # claimed: not due for another poller


def test_a_batchs_next_reads_are_put_in_one_command_each_when_it_is_due(redis_client, settings, fake_ov):
    sessions = ("n1", "n2", "n3")
    for sid in sessions:
        _running(redis_client, settings, fake_ov, sid, reads_running=5)
    _due_now(redis_client, settings)
    due, zadds = Keys(settings.key_prefix).phase2_due(), redis_client.info("commandstats")["cmdstat_zadd"]["calls"]
    before = time.time()
    assert run_due_polls(redis_client, settings, context_of(settings), threads=3) == 3
    # one ZADD claimed the three, one put their next reads (a script's own ZADD counts too)
    assert redis_client.info("commandstats")["cmdstat_zadd"]["calls"] - zadds == 2
    interval = settings.phase2_poll_interval_s
    scores = [score for _, score in redis_client.zrange(due, 0, -1, withscores=True)]
    assert len(scores) == 3 and all(before + interval <= s <= time.time() + interval for s in scores), scores


def test_a_read_whose_poller_died_is_read_again_when_its_claim_lapses(
    redis_client, settings, fake_ov, monkeypatch: pytest.MonkeyPatch
):
    request = _running(redis_client, settings, fake_ov, "lapsed", reads_running=0)
    _due_now(redis_client, settings)
    monkeypatch.setattr(phase2_due, "CLAIM_LEASE_S", 0.0)  # the claim lapses at once
    claimed, _ = claim_due(redis_client, settings)  # a poller that dies before reading
    assert claimed and _task_reads(fake_ov) == 0
    time.sleep(0.01)  # past the (zero) lease
    assert run_due_polls(redis_client, settings, context_of(settings)) == 1  # another poller
    assert CommitRecords(redis_client, settings).outcome(request).status == "completed"


def test_a_claim_drops_its_entry_only_while_no_read_was_put_there_since(redis_client, settings, fake_ov):
    request = _running(redis_client, settings, fake_ov, "again")
    _due_now(redis_client, settings)
    [inflight], claim = claim_due(redis_client, settings)
    # the next read of the slot (the session's next commit, say) is put before the claim is dropped
    redis_client.zadd(Keys(settings.key_prefix).phase2_due(), {inflight: time.time() + 5})
    settle(redis_client, settings, claim, {}, [inflight])
    assert due_reads(redis_client, settings) == 1
    assert request.commit_id  # (the commit the slot holds is untouched)


def test_a_slot_reading_phase_2_with_no_due_entry_is_put_back_by_the_sweep(redis_client, settings, fake_ov):
    request = _running(redis_client, settings, fake_ov, "lost-entry", reads_running=0)
    redis_client.delete(Keys(settings.key_prefix).phase2_due())  # lost (a failover's moment)
    index = Keys(settings.key_prefix).commits_in_flight()
    for _ in range(2):  # stranded at two looks: put back
        redis_client.zadd(index, dict.fromkeys(redis_client.zrange(index, 0, -1), 0))
        swept = commit_sweep.sweep(redis_client, settings)
    assert swept == 1 and due_reads(redis_client, settings) == 1
    records = CommitRecords(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=lambda: records.outcome(request).status == "completed")


def test_a_read_for_a_commit_that_ended_is_dropped_unread(redis_client, settings, fake_ov):
    request = _running(redis_client, settings, fake_ov, "ended", reads_running=0)
    inflight = session_keys(settings, request.address).commit_inflight
    redis_client.delete(inflight)  # its record ended the slot (another reader recorded it final)
    _due_now(redis_client, settings)
    assert run_due_polls(redis_client, settings, context_of(settings)) == 1
    assert _task_reads(fake_ov) == 0 and due_reads(redis_client, settings) == 0


def test_a_final_read_whose_check_met_redis_away_schedules_it_when_redis_answers(
    redis_client, settings, fake_ov, monkeypatch: pytest.MonkeyPatch
):
    """The read recorded the commit final (no memory), then Redis went away before the
    extraction check was scheduled: the record ended the slot, so a later claim would find
    nothing. The read waits Redis out in place and schedules the check."""
    fake_ov.phase2_reads_until_done = 0
    request = running_commit(redis_client, settings, fake_ov, "quiet", "hello there")
    calls = redis_away_at_the_first_check(monkeypatch)
    _due_now(redis_client, settings)
    assert run_due_polls(redis_client, settings, context_of(settings)) == 1
    outcome = CommitRecords(redis_client, settings).outcome(request)
    assert (outcome.status, outcome.memories_extracted, len(calls)) == ("completed", 0, 2)
    assert f"{request.commit_id}_extraction" in commit_queue(redis_client, settings).scheduled_job_registry
    assert due_reads(redis_client, settings) == 0


def test_a_read_that_raced_the_commits_end_makes_no_slot_again(redis_client, settings, fake_ov):
    """A read claimed twice (its lease lapsed while OV was slow): the other one recorded the
    commit final and ended the slot; this one's failed read must not make a slot anew (a hash
    with no request and no lifetime) nor a due entry."""
    once = settings.model_copy(update={"ov_retries": 0})
    request = _running(redis_client, once, fake_ov, "raced")
    inflight = session_keys(once, request.address).commit_inflight
    state = poll_state(redis_client.hget(inflight, POLL_FIELD))
    redis_client.delete(inflight, Keys(once.key_prefix).phase2_due())  # ended by the other read
    fake_ov.fail_next(1, status=503, route="/api/v1/tasks/")
    assert read_phase2(redis_client, context_of(once), request, state) is None  # a failed read: next one...
    assert not redis_client.exists(inflight) and due_reads(redis_client, once) == 0  # ...not put


def test_a_poll_job_an_earlier_release_scheduled_hands_the_next_read_to_the_due_set(redis_client, settings, fake_ov):
    """During a rolling upgrade this release's worker runs a ``poll_phase2`` job the previous
    release scheduled: its slot names that job and holds no read state. The job's read puts
    the next one in the due set with its state, and the commit completes from there (no sweep,
    no WARNING that it was lost)."""
    request = _running(redis_client, settings, fake_ov, "upgraded", reads_running=2)
    inflight = session_keys(settings, request.address).commit_inflight
    redis_client.hset(inflight, "job", f"{request.commit_id}_poll1")  # as 0.3.0 left it
    redis_client.hdel(inflight, POLL_FIELD)
    redis_client.delete(Keys(settings.key_prefix).phase2_due())
    polled = run_poll(
        redis_client, context_of(settings), request, deadline_at=time.time() + 60, failed_reads=0, attempt=1
    )
    assert polled.status == "running"
    assert redis_client.hget(inflight, "job").decode() == POLLING and poll_state(
        redis_client.hget(inflight, POLL_FIELD)
    )
    assert due_reads(redis_client, settings) == 1
    records = CommitRecords(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=lambda: records.outcome(request).status == "completed")
