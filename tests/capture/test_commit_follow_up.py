"""A commit asked for while one of the session is in flight: an end (or compact, or memory_store)
must take every message written before it, so joining a commit whose phase 1 already asked OV
owes one more commit after it (workers.commits.request.owes_follow_up), which the sweep starts
once that commit is final; a pending one takes them all, and a threshold needs none."""

from __future__ import annotations

import httpx
import pytest

from core.events import CommitOutcome, CommitRequest
from core.session import SessionAddress
from workers.commits import sweep as commit_sweep
from workers.commits.records import CommitRecords
from workers.commits.request import owes_follow_up, request_commit
from workers.commits.worker import drain_jobs
from workers.store.keys import Keys

ADDRESS = SessionAddress("ended", "main", None)
FINAL = ("completed", "failed", "timeout", "skipped")


def _joined(keep: int) -> CommitRequest:
    return CommitRequest(
        commit_id="c",
        ov_session_id="s",
        agent_id="main",
        reason="threshold",
        keep_recent_count=keep,
        generation=1,
        requested_at=0.0,
    )


def _recorded(status: str | None) -> CommitOutcome | None:
    if status is None:
        return None
    return CommitOutcome(commit_id="c", ov_session_id="s", agent_id="main", reason="threshold", status=status)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reason", "keep", "joined_keep", "recorded", "owed"),
    [
        ("session_end", 0, 0, "running", True),  # phase 1 asked OV (or is asking): the newest may be left
        ("compact", 0, 0, "running", True),
        ("memory_store", 0, 0, "running", True),
        ("manual", 0, 0, "running", True),
        ("session_end", 0, 0, "pending", False),  # not asked yet: it takes every message written so far
        ("session_end", 0, 0, None, False),
        ("session_end", 0, 10, "pending", True),  # it would keep the newest ten out of the archive
        ("session_end", 10, 10, "pending", False),
        ("threshold", 10, 10, "running", False),  # the next threshold takes what it left
        ("threshold", 0, 10, "pending", False),
    ],
)
def test_which_joins_owe_a_commit_after(reason, keep, joined_keep, recorded, owed):
    assert owes_follow_up(reason, keep, _joined(joined_keep), _recorded(recorded)) is owed


def _write(fake, texts: list[str]) -> None:
    client = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov")
    msgs = [{"role": "user", "content": t} for t in texts]
    client.post(f"/api/v1/sessions/{ADDRESS.ov_session_id}/messages/batch", json={"messages": msgs}).raise_for_status()


def _status(redis_client, settings, request) -> str | None:
    outcome = CommitRecords(redis_client, settings).outcome(request)
    return None if outcome is None else outcome.status


def _outcomes(redis_client, settings) -> list[CommitOutcome]:
    return CommitRecords(redis_client, settings).list(ADDRESS)


def _sweep_now(redis_client, settings) -> int:
    index = Keys(settings.key_prefix).commits_in_flight()
    redis_client.zadd(index, dict.fromkeys(redis_client.zrange(index, 0, -1), 0))
    return commit_sweep.sweep(redis_client, settings)


def _archived(fake) -> list[str]:
    return [m["parts"][0]["text"] for a in fake.sessions[ADDRESS.ov_session_id].archives for m in a.messages]


def test_an_end_joining_a_commit_past_phase_1_is_followed_by_its_own(redis_client, settings, fake_ov):
    fake_ov.phase2_reads_until_done = 3  # phase 2 runs a while: the threshold commit stays in flight
    _write(fake_ov, ["early 1", "early 2"])
    threshold = request_commit(redis_client, settings, ADDRESS, reason="threshold", keep_recent_count=0)
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, threshold) == "running")
    _write(fake_ov, ["last words"])  # the child's last turn, after phase 1 took the others
    end = request_commit(redis_client, settings, ADDRESS, reason="session_end", keep_recent_count=0)
    assert end.commit_id == threshold.commit_id  # joined: one commit in flight per session
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, threshold) in FINAL)
    assert "last words" not in _archived(fake_ov)
    assert _sweep_now(redis_client, settings) == 1  # the commit it owed
    followed = [o for o in _outcomes(redis_client, settings) if o.commit_id != threshold.commit_id]
    assert [o.reason for o in followed] == ["session_end"]
    assert drain_jobs(
        redis_client, settings, until=lambda: all(o.status in FINAL for o in _outcomes(redis_client, settings))
    )
    assert "last words" in _archived(fake_ov)
    assert len(fake_ov.sessions[ADDRESS.ov_session_id].archives) == 2
    assert _sweep_now(redis_client, settings) == 0  # nothing more owed; the slot is unindexed
    assert redis_client.zcard(Keys(settings.key_prefix).commits_in_flight()) == 0


def test_an_end_joining_a_pending_commit_is_taken_by_it(redis_client, settings, fake_ov):
    _write(fake_ov, ["early 1"])
    threshold = request_commit(redis_client, settings, ADDRESS, reason="threshold", keep_recent_count=0)
    _write(fake_ov, ["last words"])
    request_commit(redis_client, settings, ADDRESS, reason="session_end", keep_recent_count=0)
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, threshold) in FINAL)
    assert _archived(fake_ov) == ["early 1", "last words"]
    assert _sweep_now(redis_client, settings) == 0
    assert len(fake_ov.sessions[ADDRESS.ov_session_id].archives) == 1


def test_any_new_commit_pays_what_was_owed(redis_client, settings, fake_ov):
    fake_ov.phase2_reads_until_done = 2
    _write(fake_ov, ["early"])
    first = request_commit(redis_client, settings, ADDRESS, reason="threshold", keep_recent_count=0)
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, first) == "running")
    request_commit(redis_client, settings, ADDRESS, reason="compact", keep_recent_count=0)
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, first) in FINAL)
    _write(fake_ov, ["later"])
    second = request_commit(redis_client, settings, ADDRESS, reason="threshold", keep_recent_count=0)
    assert second.commit_id != first.commit_id
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, second) in FINAL)
    assert _sweep_now(redis_client, settings) == 0  # the threshold commit took what compact was owed
    assert len(fake_ov.sessions[ADDRESS.ov_session_id].archives) == 2


def test_an_end_joining_a_pending_commit_that_keeps_the_newest_is_followed(redis_client, settings, fake_ov):
    _write(fake_ov, ["early 1", "early 2", "last words"])
    threshold = request_commit(redis_client, settings, ADDRESS, reason="threshold", keep_recent_count=1)
    request_commit(redis_client, settings, ADDRESS, reason="session_end", keep_recent_count=0)
    assert drain_jobs(redis_client, settings, until=lambda: _status(redis_client, settings, threshold) in FINAL)
    assert _archived(fake_ov) == ["early 1", "early 2"]  # the keep window held the last one back
    assert _sweep_now(redis_client, settings) == 1
    assert drain_jobs(
        redis_client, settings, until=lambda: all(o.status in FINAL for o in _outcomes(redis_client, settings))
    )
    assert _archived(fake_ov) == ["early 1", "early 2", "last words"]
