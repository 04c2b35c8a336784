"""POST /v1/assemble against a real redis-server and the FakeOV."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from core.messages.tokens import estimate_message_tokens
from core.recall.text import AUTO_RECALL_SOURCE_MARKER
from core.session import SessionAddress
from tests.helpers.capture import stored_snapshot
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.context import OVBreaker
from workers.store.applied import AppliedState

pytestmark = pytest.mark.redis

SID = "sess-1"


def ov_turns(*texts: str) -> list[dict[str, Any]]:
    """OV message bodies alternating user / assistant."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "text": t}]}
        for i, t in enumerate(texts)
    ]


def oc_turns(*texts: str) -> list[dict[str, Any]]:
    """The same turns as OpenClaw holds them."""
    out: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        if i % 2 == 0:
            out.append({"role": "user", "content": text})
        else:
            out.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    return out


def main_call(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"sessionId": SID, "messages": messages, "prompt": "next", **extra}


def context_reads(fake: FakeOV) -> int:
    return sum(1 for method, path in fake.calls if method == "GET" and path.endswith("/context"))


def finds(fake: FakeOV) -> list[str]:
    return [path for method, path in fake.calls if path.endswith("/search/find")]


# --- passthrough cases ---------------------------------------------------------------------


async def test_bypassed_session_passes_through_without_ov(make_rpc: Any, fake: FakeOV) -> None:
    rpc = await make_rpc(fake, bypass_session_patterns=("agent:*:cron:**",))
    messages = oc_turns("hello there friend")
    r = await rpc.assemble(main_call(messages, sessionKey="agent:main:cron:nightly:1"))
    assert r.status_code == 200
    assert r.json() == {"messages": messages, "estimatedTokens": estimate_message_tokens(messages)}
    assert fake.calls == []


async def test_unknown_session_passes_through_and_stores_nothing(rpc: Any) -> None:
    messages = oc_turns("first message of a new user")
    r = await rpc.assemble(main_call(messages))
    assert r.status_code == 200
    assert r.json()["messages"] == messages
    assert "systemPromptAddition" not in r.json()
    assert stored_snapshot(rpc.redis, rpc.settings, SessionAddress(SID, "main", None)) is None


async def test_ov_down_passes_through_and_is_counted(rpc: Any) -> None:
    rpc.fake.down = True
    messages = oc_turns("hello", "hi", "how are you")
    r = await rpc.assemble(main_call(messages))
    assert r.status_code == 200 and r.json()["messages"] == messages
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, 'ovstream_ov_unavailable_total{op="assemble"}') == 1.0


async def test_after_ov_was_down_assemble_skips_it_for_a_while(rpc: Any) -> None:
    now = [1000.0]
    rpc.app.state.services.ov_breaker = OVBreaker(cooldown_s=5.0, clock=lambda: now[0])
    rpc.fake.down = True
    messages = oc_turns("hello", "hi", "how are you")
    await rpc.assemble(main_call(messages))
    tried = len(rpc.fake.calls)
    rpc.fake.down = False
    r = await rpc.assemble(main_call(messages))  # within the cooldown: OV is not asked
    assert r.json()["messages"] == messages and len(rpc.fake.calls) == tried
    now[0] += 5.0
    await rpc.ov.add_messages(SID, ov_turns("hello", "hi", "how are you"))
    rpc.mark_captured(SID, 3)
    r = await rpc.assemble(main_call(messages))  # cooldown over: OV answers again
    assert context_reads(rpc.fake) == 2 and len(r.json()["messages"]) == 3  # the failed try + this one


# --- main call from the snapshot -------------------------------------------------------------


async def test_miss_reads_ov_once_then_hits_serve_without_ov(rpc: Any) -> None:
    await rpc.ov.add_messages(SID, ov_turns("what is ovstream", "a context engine"))
    rpc.mark_captured(SID, 2)
    messages = oc_turns("what is ovstream", "a context engine")
    first = await rpc.assemble(main_call(messages))
    assert first.status_code == 200
    assert context_reads(rpc.fake) == 1
    snapshot = stored_snapshot(rpc.redis, rpc.settings, SessionAddress(SID, "main", None))
    assert snapshot is not None and snapshot.captured_through == 2

    for _ in range(3):
        again = await rpc.assemble(main_call(messages))
        assert again.json() == first.json()
    assert context_reads(rpc.fake) == 1  # hits never touch OV
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, "ovstream_snapshot_hits_total") == 3.0
    assert rpc.metric(metrics, "ovstream_snapshot_misses_total") == 1.0
    assert rpc.metric(metrics, "ovstream_snapshot_hit_ratio") == 0.75


async def test_answer_is_the_ov_context_through_the_pipeline(rpc: Any) -> None:
    await rpc.ov.add_messages(
        SID,
        [
            {"role": "user", "parts": [{"type": "text", "text": "read the file"}]},
            {
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool",
                        "tool_id": "t1",
                        "tool_name": "read_file",
                        "tool_input": {"path": "a.py"},
                        "tool_output": "x = 1",
                        "tool_status": "completed",
                    }
                ],
            },
            {"role": "assistant", "parts": [{"type": "text", "text": "it sets x"}]},
        ],
    )
    rpc.mark_captured(SID, 4)
    caller_view = [
        {"role": "user", "content": "read the file"},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "t1", "name": "read_file", "arguments": {"path": "a.py"}}],
        },
        {
            "role": "toolResult",
            "toolCallId": "t1",
            "toolName": "read_file",
            "content": [{"type": "text", "text": "x = 1"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "it sets x"}]},
    ]
    body = (await rpc.assemble(main_call(caller_view))).json()
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert body["messages"][1]["content"] == [
        {"type": "toolCall", "id": "t1", "name": "read_file", "arguments": {"path": "a.py"}}
    ]
    assert body["estimatedTokens"] == estimate_message_tokens(body["messages"])


async def test_archive_gives_summary_and_guide(rpc: Any) -> None:
    await rpc.ov.add_messages(SID, ov_turns("we chose postgres for storage", "noted: postgres"))
    await rpc.ov.commit(SID, keep_recent_count=0, enable_working_memory=True)
    rpc.fake.run_phase2()
    await rpc.ov.add_messages(SID, ov_turns("and the cache?", "redis"))
    rpc.mark_captured(SID, 4)
    body = (await rpc.assemble(main_call(oc_turns("a", "b", "and the cache?", "redis"), tokenBudget=64_000))).json()
    first = body["messages"][0]["content"]
    first_text = first if isinstance(first, str) else first[0]["text"]
    assert first_text.startswith("[Session History Summary]\n")
    assert "ov_archive_search" in body["systemPromptAddition"]
    assert body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "redis"}]}
    assert body["estimatedTokens"] <= 64_000


async def test_lag_overlay_appends_the_uncaptured_turns(rpc: Any) -> None:
    await rpc.ov.add_messages(SID, ov_turns("q1", "a1", "q2", "a2"))
    rpc.mark_captured(SID, 4)
    await rpc.assemble(main_call(oc_turns("q1", "a1", "q2", "a2")))  # snapshot at 4

    # The caller is two turns ahead: capture has not applied them yet.
    behind = oc_turns("q1", "a1", "q2", "a2", "q3 not yet in OV", "a3 not yet in OV")
    body = (await rpc.assemble(main_call(behind))).json()
    texts = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in body["messages"]]
    assert texts == ["q1", "a1", "q2", "a2", "q3 not yet in OV", "a3 not yet in OV"]
    assert context_reads(rpc.fake) == 1  # served from the snapshot, not passthrough or a re-read
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, "ovstream_lag_overlays_total") == 1.0


async def test_session_ov_knows_only_in_part_passes_through_without_capture_record(rpc: Any) -> None:
    # No capture record: the reference's guess (OV has fewer messages, no archive) applies.
    await rpc.ov.add_messages(SID, ov_turns("only one stored"))
    messages = oc_turns("message one", "message two")
    body = (await rpc.assemble(main_call(messages))).json()
    assert body["messages"] == messages


async def test_new_snapshot_version_is_picked_up(rpc: Any) -> None:
    await rpc.ov.add_messages(SID, ov_turns("q1", "a1"))
    rpc.mark_captured(SID, 2, stream_id="1700000000000-0")
    await rpc.assemble(main_call(oc_turns("q1", "a1")))
    # Capture applies another turn and refreshes the snapshot (as workers.capture.worker does).
    from workers.store.snapshots import refresh_snapshot

    await rpc.ov.add_messages(SID, ov_turns("q2", "a2"))
    ov = rpc.ov.scoped(peer="main")
    await refresh_snapshot(
        rpc.app.state.services.redis,
        rpc.settings,
        SessionAddress(SID, "main"),
        partial(ov.get_context, SID, token_budget=rpc.settings.snapshot_token_budget),
        applied=AppliedState(last_id="1700000000001-0", captured=4),
    )
    body = (await rpc.assemble(main_call(oc_turns("q1", "a1", "q2", "a2")))).json()
    assert body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "a2"}]}


# --- isolation -----------------------------------------------------------------------------


async def test_two_agents_never_share_a_snapshot(rpc: Any) -> None:
    sid = "123e4567-e89b-12d3-a456-426614174000"  # a UUID: both agents map to the same OV session
    await rpc.ov.add_messages(sid, ov_turns("shared question", "shared answer"))
    for agent in ("alpha", "beta"):
        rpc.mark_captured(sid, 2, agent_id=agent)
    body = {"sessionId": sid, "messages": oc_turns("shared question", "shared answer"), "prompt": "x"}
    await rpc.assemble({**body, "runtimeContext": {"agentId": "alpha"}})
    await rpc.assemble({**body, "runtimeContext": {"agentId": "beta"}})
    assert context_reads(rpc.fake) == 2  # beta did not hit alpha's snapshot
    for agent in ("alpha", "beta"):
        snap = stored_snapshot(rpc.redis, rpc.settings, SessionAddress(sid, agent, None))
        assert snap is not None and snap.agent_id == agent
    # The OV reads acted as each agent.
    peers = [r.headers.get("X-OpenViking-Actor-Peer") for r in rpc.fake.requests if r.url.path.endswith("/context")]
    assert peers == ["alpha", "beta"]


async def test_two_api_keys_see_only_their_own_context(make_rpc: Any) -> None:
    fake = FakeOV(api_keys={"key-alice": ("acme", "alice"), "key-bob": ("acme", "bob")})
    rpc = await make_rpc(fake)
    await rpc.ov.scoped(api_key="key-alice").add_messages("shared", ov_turns("alice secret", "ok alice"))
    await rpc.ov.scoped(api_key="key-bob").add_messages("shared", ov_turns("bob secret", "ok bob"))
    body = {"sessionId": "shared", "messages": oc_turns("x", "y"), "prompt": "p"}

    alice = (await rpc.assemble(body, **{"X-OpenViking-API-Key": "key-alice"})).json()
    bob = (await rpc.assemble(body, Authorization="Bearer key-bob")).json()
    alice_again = (await rpc.assemble(body, **{"X-OpenViking-API-Key": "key-alice"})).json()
    assert "alice secret" in str(alice) and "bob secret" not in str(alice)
    assert "bob secret" in str(bob) and "alice secret" not in str(bob)
    assert alice_again == alice  # served from alice's snapshot, not bob's
    keys = sorted(k.decode() for k in rpc.redis.scan_iter("ovstream:*snapshot*"))
    assert len(keys) == 2 and all("shared" in k for k in keys)
    no_key = (await rpc.assemble(body)).json()  # the service has no key: OV refuses, passthrough
    assert no_key["messages"] == body["messages"]


# --- transform-context call: auto-recall -------------------------------------------------------


def recall_call(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "sessionId": SID,
        "messages": [
            {"role": "assistant", "content": [{"type": "text", "text": "earlier"}]},
            {"role": "user", "content": text},
        ],
        **extra,
    }


async def test_recall_prepends_user_and_agent_memories(rpc: Any) -> None:
    rpc.fake.seed_memory("User prefers Rust for backend services.", category="preferences")
    rpc.fake.seed_memory("Deploys of the backend go through the blue green runbook.", peer="main")
    rpc.fake.seed_memory("Backend secrets of another agent.", peer="other")
    body = (await rpc.assemble(recall_call("which backend language and deploy runbook?"))).json()
    latest = body["messages"][-1]["content"]
    assert latest.startswith("<relevant-memories>\n" + AUTO_RECALL_SOURCE_MARKER)
    assert "User prefers Rust" in latest and "blue green runbook" in latest
    assert "another agent" not in latest
    assert latest.endswith("</relevant-memories>\n\nwhich backend language and deploy runbook?")
    assert body["messages"][0] == {"role": "assistant", "content": [{"type": "text", "text": "earlier"}]}
    assert body["estimatedTokens"] == estimate_message_tokens(body["messages"])
    assert "systemPromptAddition" not in body
    targets = {r.read().decode() for r in rpc.fake.requests if r.url.path.endswith("/search/find")}
    assert any("viking://~/memories" in t for t in targets)
    assert any("viking://~/peers/main/memories" in t for t in targets)
    assert context_reads(rpc.fake) == 0  # the transform call never rebuilds context


async def test_recall_reads_full_text_unless_abstract_preferred(make_rpc: Any, fake: FakeOV) -> None:
    fake.seed_memory("Full memory text about rust backend choices.", abstract="Rust abstract line")
    full = await make_rpc(fake)
    text = (await full.assemble(recall_call("rust backend choices"))).json()["messages"][-1]["content"]
    assert "Full memory text about rust backend choices." in text
    short = await make_rpc(fake, recall_prefer_abstract=True)
    text = (await short.assemble(recall_call("rust backend choices"))).json()["messages"][-1]["content"]
    assert "Rust abstract line" in text and "Full memory text" not in text


async def test_recall_respects_score_limit_and_char_budget(make_rpc: Any, fake: FakeOV) -> None:
    for i in range(5):
        fake.seed_memory(f"rust backend memory number {i} " + "pad " * 40)
    rpc = await make_rpc(fake, recall_limit=2)
    text = (await rpc.assemble(recall_call("rust backend memory"))).json()["messages"][-1]["content"]
    assert text.count("<uri>") == 2
    tight = await make_rpc(fake, recall_max_injected_chars=300)
    text = (await tight.assemble(recall_call("rust backend memory"))).json()["messages"][-1]["content"]
    assert text.count("<uri>") == 1  # one whole memory fits; none is cut
    picky = await make_rpc(fake, recall_score_threshold=1.0)
    body = (await picky.assemble(recall_call("rust nothing-matches-fully"))).json()
    assert AUTO_RECALL_SOURCE_MARKER not in str(body)


@pytest.mark.parametrize(
    ("messages", "settings"),
    [
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": []}], {}),
        ([{"role": "user", "content": "which backend language?"}], {"auto_recall": False}),
        ([{"role": "user", "content": f"{AUTO_RECALL_SOURCE_MARKER}\nwhich backend language?"}], {}),
        ([{"role": "user", "content": "hey"}], {}),
    ],
    ids=["latest-not-user", "recall-off", "already-injected", "query-too-short"],
)
async def test_recall_passthroughs_never_search(make_rpc: Any, fake: FakeOV, messages: Any, settings: Any) -> None:
    fake.seed_memory("User prefers Rust for backend services.")
    rpc = await make_rpc(fake, **settings)
    body = (await rpc.assemble({"sessionId": SID, "messages": messages})).json()
    assert body["messages"] == messages
    assert finds(fake) == []


async def test_slow_recall_times_out_to_passthrough(make_rpc: Any, fake: FakeOV) -> None:
    fake.seed_memory("User prefers Rust for backend services.")
    fake.latency_s = {"find": 30.0}
    rpc = await make_rpc(fake, recall_timeout_s=0.05)
    call = recall_call("which backend language?")
    r = await rpc.assemble(call)
    assert r.status_code == 200 and r.json()["messages"] == call["messages"]
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, "ovstream_recall_timeouts_total") == 1.0


async def test_recall_with_ov_down_passes_through(rpc: Any) -> None:
    rpc.fake.down = True
    call = recall_call("which backend language?")
    r = await rpc.assemble(call)
    assert r.status_code == 200 and r.json()["messages"] == call["messages"]


async def test_recall_survives_one_failed_search(rpc: Any) -> None:
    rpc.fake.seed_memory("User prefers Rust for backend services.")
    rpc.fake.seed_memory("Agent knows the rust backend services build.", peer="main")
    rpc.fake.fail_next(1, status=500, code="INTERNAL", route="find")
    text = (await rpc.assemble(recall_call("rust backend services"))).json()["messages"][-1]["content"]
    # One of the two searches failed; the other's memory is still injected.
    assert text.startswith("<relevant-memories>") and text.count("<uri>") == 1
