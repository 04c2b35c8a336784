"""Behaviour of the in-memory OV 0.5.2 fake, over raw HTTP (httpx + MockTransport)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.fake_ov import S, add, error, http, ok, texts
from workers.dev.fake_ov.app import FakeOV

# --- sessions and messages -------------------------------------------------------------


async def test_create_get_duplicate_missing_and_delete():
    fake = FakeOV()
    async with http(fake) as c:
        created = await ok(c.post(S, json={"session_id": "s1"}))
        assert created["uri"] == "viking://user/default/sessions/s1"
        await error(c.post(S, json={"session_id": "s1"}), 409, "ALREADY_EXISTS")
        await error(c.get(f"{S}/nope"), 404, "NOT_FOUND")
        state = await ok(c.get(f"{S}/auto", params={"auto_create": "true"}))
        assert (state["message_count"], state["pending_tokens"]) == (0, 0)
        assert await ok(c.delete(f"{S}/s1")) == {"session_id": "s1"}
        await error(c.delete(f"{S}/s1"), 404, "NOT_FOUND")
        generated = await ok(c.post(S))
        assert generated["session_id"] in fake.sessions


async def test_messages_auto_create_and_are_stored_with_ids():
    fake = FakeOV()
    async with http(fake) as c:
        one = await ok(
            c.post(f"{S}/s1/messages", json={"role": "user", "content": "hi", "created_at": "2026-01-01T00:00:00Z"})
        )
        assert one == {"session_id": "s1", "message_count": 1, "pending_tokens": 1}
        batch = await ok(
            c.post(
                f"{S}/s1/messages/batch",
                json={
                    "messages": [
                        {
                            "role": "assistant",
                            "peer_id": "main",
                            "turn_id": "t1",
                            "parts": [
                                {"type": "text", "text": "yo"},
                                {
                                    "type": "tool",
                                    "tool_id": "c1",
                                    "tool_name": "ls",
                                    "tool_input": {"p": "."},
                                    "tool_output": "a b",
                                    "tool_status": "completed",
                                },
                            ],
                        }
                    ]
                },
            )
        )
        assert (batch["added"], batch["message_count"]) == (1, 2)
    m1, m2 = fake.sessions["s1"].messages
    assert m1["id"].startswith("msg_") and m1["id"] != m2["id"]
    assert (m1["role"], m1["created_at"], m1["parts"]) == (
        "user",
        "2026-01-01T00:00:00Z",
        [{"type": "text", "text": "hi"}],
    )
    assert (m2["peer_id"], m2["turn_id"]) == ("main", "t1")
    assert m2["parts"][1]["tool_output"] == "a b" and m2["parts"][1]["tool_input"] == {"p": "."}
    assert fake.sessions["s1"].total_message_count == 2


async def test_user_message_of_only_tool_parts_splits_like_the_server():
    fake = FakeOV()
    tool = {"type": "tool", "tool_id": "c", "tool_name": "t", "tool_output": "x"}
    async with http(fake) as c:
        out = await ok(c.post(f"{S}/s/messages/batch", json={"messages": [{"role": "user", "parts": [tool, tool]}]}))
    assert out["added"] == 2 and len(fake.sessions["s"].messages) == 2


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "x"}] * 101},
        {"messages": [{"content": "no role"}]},
        {"messages": [{"role": "user"}]},
        {"messages": [{"role": "user", "content": "x", "peer_id": "a/b"}]},
        {"messages": "nope"},
        {},
    ],
)
async def test_bad_batches_are_invalid_argument_and_store_nothing(body):
    fake = FakeOV()
    async with http(fake) as c:
        await error(c.post(f"{S}/s/messages/batch", json=body), 400, "INVALID_ARGUMENT")
        await error(c.post(f"{S}/s/messages/batch", content=b"{not json"), 400, "INVALID_ARGUMENT")
    assert "s" not in fake.sessions


async def test_batch_of_exactly_100_is_accepted():
    async with http(FakeOV()) as c:
        assert (await add(c, "s", *["x"] * 100))["added"] == 100


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("abcd", 1),
        ("abcde", 2),
        ("", 0),
        ("你好", 3),
        ("😀", 2),
        ("a😀", 3),
        ("é" * 4, 1),
        ("こんにちは", 8),
        ("한국", 3),
    ],
)
async def test_pending_tokens_use_the_ov_weights(text, tokens):
    async with http(FakeOV()) as c:
        out = await ok(c.post(f"{S}/s/messages", json={"role": "user", "content": text}))
    assert out["pending_tokens"] == tokens


async def test_pending_tokens_are_per_message_ceil_and_exclude_the_keep_window():
    fake = FakeOV()
    async with http(fake) as c:
        out = await add(c, "s", "a", "b", "c")  # 1 char each: ceil(0.25) = 1 per message
        assert out["pending_tokens"] == 3
        await ok(c.post(f"{S}/s/commit", json={"keep_recent_count": 2}))
        state = await ok(c.get(f"{S}/s"))
        assert (state["pending_tokens"], state["keep_recent_count"], state["message_count"]) == (0, 2, 2)
        out = await add(c, "s", "d" * 8)  # the oldest kept message ("b") leaves the window
        assert out["pending_tokens"] == 1
        out = await add(c, "s", "e")
        assert out["pending_tokens"] == 1 + 1
        state = await ok(c.get(f"{S}/s"))
        assert (state["total_message_count"], state["commit_count"]) == (5, 1)


# --- commit ----------------------------------------------------------------------------


async def test_commit_archives_all_but_keep_recent():
    fake = FakeOV()
    async with http(fake) as c:
        await add(c, "s", "m1", "m2", "m3", "m4")
        res = await ok(c.post(f"{S}/s/commit", json={"keep_recent_count": 1}))
        assert (res["status"], res["archived"]) == ("accepted", True)
        assert res["archive_uri"] == "viking://user/default/sessions/s/history/archive_001"
        assert res["task_id"] in fake.tasks
        assert texts(fake.sessions["s"].messages) == ["m4"]
        assert texts(fake.sessions["s"].archives[0].messages) == ["m1", "m2", "m3"]
        await add(c, "s", "m5")
        res2 = await ok(c.post(f"{S}/s/commit", json={}))
        assert res2["archive_uri"].endswith("/history/archive_002")
        assert fake.sessions["s"].messages == []


async def test_commit_skips():
    async with http(FakeOV()) as c:
        await ok(c.post(S, json={"session_id": "s"}))
        empty = await ok(c.post(f"{S}/s/commit"))
        assert (empty["status"], empty["task_id"], empty["archive_uri"], empty["archived"], empty["reason"]) == (
            "skipped",
            None,
            None,
            False,
            "no_messages",
        )
        await add(c, "s", "a", "b")
        kept = await ok(c.post(f"{S}/s/commit", json={"keep_recent_count": 5}))
        assert (kept["status"], kept["reason"]) == ("skipped", "all_within_keep_window")
        await error(c.post(f"{S}/missing/commit", json={}), 404, "NOT_FOUND")
        await error(c.post(f"{S}/s/commit", json={"keep_recent_count": -1}), 400, "INVALID_ARGUMENT")
        await error(c.post(f"{S}/s/commit", json={"enable_working_memory": "yes"}), 400, "INVALID_ARGUMENT")


# --- phase 2 and context ----------------------------------------------------------------


async def _commit(c: httpx.AsyncClient, sid: str, *contents: str, **body: Any) -> str:
    await add(c, sid, *contents)
    return (await ok(c.post(f"{S}/{sid}/commit", json=body)))["task_id"]


async def test_phase2_reads_until_done_then_completes_with_overview():
    fake = FakeOV(phase2_reads_until_done=2)
    async with http(fake) as c:
        tid = await _commit(c, "s", "I prefer green tea", "fine", enable_working_memory=True)
        statuses = [(await ok(c.get(f"/api/v1/tasks/{tid}")))["status"] for _ in range(4)]
        assert statuses == ["running", "running", "completed", "completed"]
        task = await ok(c.get(f"/api/v1/tasks/{tid}"))
        assert task["result"]["memories_extracted"] == {"memory_write": 1} and task["error"] is None
        state = await ok(c.get(f"{S}/s"))
        assert state["memories_extracted"] == {"total": 1, "memory_write": 1}
        ctx = await ok(c.get(f"{S}/s/context", params={"token_budget": 10000}))
        assert ctx["latest_archive_overview"].startswith("# Session summary (2 messages)")
        assert "I prefer green tea" in ctx["latest_archive_overview"]
        assert ctx["messages"] == []
        assert ctx["stats"]["totalArchives"] == 1 and ctx["stats"]["failedArchives"] == 0
        arch = await ok(c.get(f"{S}/s/archives/archive_001"))
        assert texts(arch["messages"]) == ["I prefer green tea", "fine"] and arch["overview"]


async def test_overview_only_with_working_memory():
    async with http(FakeOV()) as c:
        tid = await _commit(c, "s", "hello")
        await ok(c.get(f"/api/v1/tasks/{tid}"))
        ctx = await ok(c.get(f"{S}/s/context"))
        assert ctx["latest_archive_overview"] == "" and ctx["stats"]["failedArchives"] == 0
        arch = await ok(c.get(f"{S}/s/archives/archive_001"))
        assert arch["overview"] == "" and texts(arch["messages"]) == ["hello"]


async def test_pending_archive_messages_stay_in_context_until_phase2_ends():
    fake = FakeOV(phase2="hang")
    async with http(fake) as c:
        tid = await _commit(c, "s", "old1", "old2", "new", keep_recent_count=1)
        for _ in range(5):
            assert (await ok(c.get(f"/api/v1/tasks/{tid}")))["status"] == "running"
        ctx = await ok(c.get(f"{S}/s/context"))
        assert texts(ctx["messages"]) == ["old1", "old2", "new"]
        await error(c.get(f"{S}/s/archives/archive_001"), 404, "NOT_FOUND")
        assert fake.run_phase2() == 1
        assert (await ok(c.get(f"/api/v1/tasks/{tid}")))["status"] == "completed"
        assert texts((await ok(c.get(f"{S}/s/context")))["messages"]) == ["new"]


async def test_failed_phase2_drops_the_archive_from_context_and_counts_it():
    fake = FakeOV(phase2="fail")
    async with http(fake) as c:
        tid = await _commit(
            c, "s", "remember my cat is Tom", "lost", "kept", keep_recent_count=1, enable_working_memory=True
        )
        task = await ok(c.get(f"/api/v1/tasks/{tid}"))
        assert task["status"] == "failed" and task["error"]
        ctx = await ok(c.get(f"{S}/s/context"))
        assert texts(ctx["messages"]) == ["kept"]
        assert ctx["latest_archive_overview"] == ""
        assert (ctx["stats"]["failedArchives"], ctx["stats"]["totalArchives"]) == (1, 1)
        assert fake.memories() == []
        # a failure does not block later commits; the next one completes
        fake.phase2 = "complete"
        tid2 = await _commit(c, "s", "after", enable_working_memory=True)
        assert (await ok(c.get(f"/api/v1/tasks/{tid2}")))["status"] == "completed"
        ctx = await ok(c.get(f"{S}/s/context"))
        assert ctx["stats"]["failedArchives"] == 0 and ctx["stats"]["totalArchives"] == 2
        assert "lost" not in ctx["latest_archive_overview"] and "after" in ctx["latest_archive_overview"]


async def test_phase2_mode_is_fixed_at_commit_time():
    fake = FakeOV(phase2="fail")
    async with http(fake) as c:
        tid = await _commit(c, "s", "x")
        fake.phase2 = "complete"
        assert (await ok(c.get(f"/api/v1/tasks/{tid}")))["status"] == "failed"
        await error(c.get("/api/v1/tasks/unknown"), 404, "NOT_FOUND")


async def test_phase2_steps_alias():
    fake = FakeOV()
    fake.phase2_steps = 3
    assert fake.phase2_reads_until_done == 3


async def test_context_token_budget():
    async with http(FakeOV()) as c:
        await add(c, "s", "a" * 40, "b" * 40, "c" * 40)  # 10 tokens each
        ctx = await ok(c.get(f"{S}/s/context", params={"token_budget": 25}))
        assert [m["parts"][0]["text"][0] for m in ctx["messages"]] == ["b", "c"]
        assert ctx["estimatedTokens"] == 20 == ctx["stats"]["activeTokens"]
        zero = await ok(c.get(f"{S}/s/context", params={"token_budget": 0}))
        assert zero["messages"] == []
        await error(c.get(f"{S}/s/context", params={"token_budget": -1}), 400, "INVALID_ARGUMENT")
        await error(c.get(f"{S}/nope/context"), 404, "NOT_FOUND")


async def test_memory_extraction_targets_user_and_peer_spaces():
    fake = FakeOV()
    async with http(fake) as c:
        await ok(
            c.post(
                f"{S}/s/messages/batch",
                json={
                    "messages": [
                        {"role": "user", "content": "I prefer dark mode"},
                        {"role": "user", "content": "what time is it"},
                        {"role": "assistant", "peer_id": "coder", "content": "Remember: the repo uses uv"},
                        {"role": "assistant", "content": "I will remember that"},
                    ]
                },
            )
        )
        tid = (await ok(c.post(f"{S}/s/commit")))["task_id"]
        await ok(c.get(f"/api/v1/tasks/{tid}"))
    user_mem = fake.memories()
    assert [m.content for m in user_mem] == ["I prefer dark mode"]
    assert user_mem[0].uri.startswith("viking://user/default/memories/preferences/mem_")
    assert user_mem[0].uri.endswith(".md")
    assert [m.content for m in fake.memories(peer="coder")] == ["Remember: the repo uses uv"]
