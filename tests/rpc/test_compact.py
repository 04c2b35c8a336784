"""POST /v1/compact: a synchronous commit through the RQ jobs (real Redis, FakeOV)."""

from __future__ import annotations

from typing import Any

import pytest

from core.session import SessionAddress
from tests.helpers.capture import stored_snapshot
from tests.helpers.rpc import running_worker
from workers.commits.records import CommitRecords
from workers.commits.request import request_commit
from workers.dev.fake_ov.app import FakeOV

pytestmark = pytest.mark.redis

SID = "sess-c"


def turns(n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": f"turn {i} about the storage design"}],
        }
        for i in range(n)
    ]


def ov_commits(fake: FakeOV, session: str | None = None) -> int:
    """Commits OV was asked for (of ``session`` only, when named: a repair of an extraction the
    fake wrote nothing for commits a session of its own, workers.commits.repair)."""
    ends = f"/sessions/{session}/commit" if session else "/commit"
    return sum(1 for method, path in fake.calls if method == "POST" and path.endswith(ends))


async def test_bypassed_session_is_not_compacted(make_rpc: Any, fake: FakeOV) -> None:
    rpc = await make_rpc(fake, bypass_session_patterns=("agent:*:cron:**",))
    r = await rpc.compact({"sessionId": SID, "sessionKey": "agent:main:cron:daily"})
    assert r.status_code == 200
    assert r.json() == {"ok": True, "compacted": False, "reason": "session_bypassed"}
    assert fake.calls == []


async def test_unknown_session_is_not_found(rpc: Any) -> None:
    r = await rpc.compact({"sessionId": "never-seen"})
    assert r.json() == {"ok": True, "compacted": False, "reason": "session_not_found"}


async def test_ov_down_is_503(rpc: Any) -> None:
    rpc.fake.down = True
    r = await rpc.compact({"sessionId": SID})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "ov_unavailable"


async def test_compact_archives_and_reports(rpc: Any, commit_worker: None) -> None:
    await rpc.ov.add_messages(SID, turns(6))
    r = await rpc.compact({"sessionId": SID, "currentTokenCount": 1234, "tokenBudget": 64_000})
    body = r.json()
    assert r.status_code == 200, body
    assert (body["ok"], body["compacted"], body["reason"]) == (True, True, "commit_completed")
    result = body["result"]
    assert result["firstKeptEntryId"] == "archive_001"
    # both counts measure what assemble sends; the host's own count is passed back beside them
    assert result["details"]["hostTokensBefore"] == 1234
    assert 0 < result["tokensBefore"] != 1234
    assert result["summary"]  # the archive overview (working memory was on)
    assert result["tokensAfter"] is not None and result["tokensAfter"] > 0
    assert rpc.fake.sessions[SID].messages == []  # nothing kept: keep_recent_count 0
    # The snapshot now holds the compacted context.
    snap = stored_snapshot(rpc.redis, rpc.settings, SessionAddress(SID, "main", None))
    assert snap is not None and snap.latest_archive_overview.strip() == result["summary"]
    [outcome] = CommitRecords(rpc.redis, rpc.settings).list(SessionAddress(SID, "main", None))
    assert (outcome.reason, outcome.status) == ("compact", "completed")


@pytest.mark.parametrize("host_count", [None, 50, 99_999])
async def test_tokens_before_and_after_measure_the_assembled_context(
    rpc: Any, commit_worker: None, host_count: int | None
) -> None:
    """Whatever the host counts (its system prompt, its tools), tokensBefore and tokensAfter are
    both what assemble sends: before the commit and next."""
    await rpc.ov.add_messages(SID, turns(4))
    before = (await rpc.assemble({"sessionId": SID, "messages": [], "prompt": None})).json()
    body = (await rpc.compact({"sessionId": SID, "currentTokenCount": host_count})).json()
    assert body["result"]["tokensBefore"] == before["estimatedTokens"] > 0
    after = (await rpc.assemble({"sessionId": SID, "messages": [], "prompt": None})).json()
    assert body["result"]["tokensAfter"] == after["estimatedTokens"]


async def test_failed_phase2_is_commit_failed(rpc: Any, commit_worker: None) -> None:
    rpc.fake.phase2 = "fail"
    await rpc.ov.add_messages(SID, turns(2))
    body = (await rpc.compact({"sessionId": SID, "currentTokenCount": 50})).json()
    assert (body["ok"], body["compacted"], body["reason"]) == (False, False, "commit_failed")
    assert body["result"]["details"]["hostTokensBefore"] == 50 and body["result"]["tokensBefore"] > 0
    assert body["result"]["details"]["commit"]["status"] == "failed"


async def test_phase2_still_running_at_the_bound_answers_phase2_pending(make_rpc: Any, fake: FakeOV) -> None:
    rpc = await make_rpc(fake, compact_wait_s=3.0)
    fake.phase2 = "hang"
    await rpc.ov.add_messages(SID, turns(2))
    with running_worker(rpc):
        body = (await rpc.compact({"sessionId": SID})).json()
    # The archive is made (phase 1); compact answers within its bound and says phase 2 goes on.
    assert (body["ok"], body["compacted"], body["reason"]) == (True, True, "phase2_pending")
    assert body["result"]["details"]["commit"]["status"] == "timeout"
    assert "still running" in body["result"]["details"]["phase2"]
    assert rpc.fake.sessions[SID].messages == []
    # Nothing final was recorded for it: the poller still owns the outcome.
    [outcome] = CommitRecords(rpc.redis, rpc.settings).list(SessionAddress(SID, "main", None))
    assert outcome.status not in ("completed", "failed", "timeout", "skipped")


async def test_nothing_to_archive_is_commit_no_archive(rpc: Any, commit_worker: None) -> None:
    await rpc.ov.create_session(SID)
    body = (await rpc.compact({"sessionId": SID, "currentTokenCount": 10})).json()
    assert (body["ok"], body["compacted"], body["reason"]) == (True, False, "commit_no_archive")
    assert body["result"]["tokensAfter"] == body["result"]["tokensBefore"] == 0  # nothing to send


async def test_a_commit_in_flight_is_awaited_not_duplicated(rpc: Any) -> None:
    await rpc.ov.add_messages(SID, turns(4))
    # Capture asked for a commit at its threshold; no worker has run it yet.
    pending = request_commit(
        rpc.redis, rpc.settings, SessionAddress(SID, "main", None), reason="threshold", keep_recent_count=0
    )
    with running_worker(rpc):
        body = (await rpc.compact({"sessionId": SID})).json()
    assert body["reason"] == "commit_completed"
    assert ov_commits(rpc.fake, SID) == 1
    [outcome] = CommitRecords(rpc.redis, rpc.settings).list(SessionAddress(SID, "main", None))
    assert outcome.commit_id == pending.commit_id


async def test_unknown_api_key_commits_inline_as_that_user(make_rpc: Any) -> None:
    fake = FakeOV(api_keys={"key-carol": ("acme", "carol")})
    rpc = await make_rpc(fake)
    await rpc.ov.scoped(api_key="key-carol").add_messages(SID, turns(4))
    r = await rpc.compact({"sessionId": SID, "currentTokenCount": 99}, **{"X-OpenViking-API-Key": "key-carol"})
    body = r.json()
    assert (body["ok"], body["compacted"], body["reason"]) == (True, True, "commit_completed"), body
    assert body["result"]["firstKeptEntryId"] == "archive_001"
    assert fake.tenant("acme", "carol").sessions[SID].messages == []
    commits = [r for r in fake.requests if r.url.path.endswith("/commit")]
    assert [r.headers.get("X-API-Key") for r in commits] == ["key-carol"]
