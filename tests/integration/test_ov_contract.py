"""The OpenViking 0.5.2 facts ovstream relies on, checked against the real server.

Plain httpx on purpose: these tests pin the wire contract (docs/OV-NOTES.md), so
they must not depend on our own client's interpretation of it.
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from core.messages.tokens import estimate_tokens
from tests.helpers.ov_http import BUDGET, err, ok, sid, text_msg

# --- health, envelope, errors -----------------------------------------------------------


def test_health_reports_version_and_dev_mode(ov_http: httpx.Client) -> None:
    body = ov_http.get("/health").json()
    assert body["status"] == "ok"
    assert body["version"] == "0.5.2"
    assert body["auth_mode"] == "dev"


def test_missing_session_is_404_not_found(ov_http: httpx.Client) -> None:
    error = err(ov_http.get(f"/api/v1/sessions/{sid('missing')}"), 404, "NOT_FOUND")
    assert "not found" in error["message"]
    err(ov_http.get(f"/api/v1/sessions/{sid('missing')}/archives/archive_001"), 404, "NOT_FOUND")
    err(ov_http.get("/api/v1/tasks/no-such-task"), 404, "NOT_FOUND")
    err(ov_http.delete(f"/api/v1/sessions/{sid('missing')}"), 404, "NOT_FOUND")


def test_old_user_memories_uri_finds_nothing_in_dev_mode(ov_http: httpx.Client) -> None:
    # dev mode answers 200 and searches a user literally called "memories";
    # API-key mode rejects it (test_api_key_mode_rejects_old_user_memories_uri)
    r = ov_http.post(
        "/api/v1/search/find", json={"query": "coffee", "target_uri": "viking://user/memories", "limit": 5}
    )
    assert ok(r)["memories"] == []


def test_find_rejects_unknown_fields(ov_http: httpx.Client) -> None:
    r = ov_http.post(
        "/api/v1/search/find", json={"query": "x", "target_uri": "viking://~/memories", "limit": 3, "bogus": 1}
    )
    error = err(r, 400, "INVALID_ARGUMENT")
    assert error["details"]["validation_errors"][0]["loc"] == ["body", "bogus"]


# --- sessions and messages --------------------------------------------------------------


def test_create_session_then_duplicate_is_409(ov_http: httpx.Client) -> None:
    s = sid("create")
    created = ok(ov_http.post("/api/v1/sessions", json={"session_id": s}))
    assert created["session_id"] == s
    assert created["uri"] == f"viking://user/default/sessions/{s}"
    err(ov_http.post("/api/v1/sessions", json={"session_id": s}), 409, "ALREADY_EXISTS")
    state = ok(ov_http.get(f"/api/v1/sessions/{s}"))
    assert (state["message_count"], state["commit_count"], state["pending_tokens"]) == (0, 0, 0)


def test_add_message_autocreates_and_echoes_fields(ov_http: httpx.Client) -> None:
    s = sid("add")
    added = ok(
        ov_http.post(
            f"/api/v1/sessions/{s}/messages",
            json=text_msg(
                "assistant", "hello there", peer_id="agent_a", created_at="2026-01-01T00:00:00Z", turn_id="turn-1"
            ),
        )
    )
    assert added == {"session_id": s, "message_count": 1, "pending_tokens": estimate_tokens("hello there")}
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json={"role": "user", "content": "plain content"}))
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    first, second = ctx["messages"]
    assert first["role"] == "assistant" and first["peer_id"] == "agent_a"
    assert first["turn_id"] == "turn-1" and first["created_at"] == "2026-01-01T00:00:00Z"
    assert first["id"].startswith("msg_")
    assert second["parts"] == [{"type": "text", "text": "plain content"}]


def test_batch_route_adds_up_to_100_and_rejects_101(ov_http: httpx.Client) -> None:
    s = sid("batch")
    msgs = [text_msg("user" if i % 2 == 0 else "assistant", f"message number {i}") for i in range(101)]
    err(ov_http.post(f"/api/v1/sessions/{s}/messages/batch", json={"messages": msgs}), 400, "INVALID_ARGUMENT")
    result = ok(ov_http.post(f"/api/v1/sessions/{s}/messages/batch", json={"messages": msgs[:100]}))
    assert result["added"] == 100 and result["message_count"] == 100
    expected = sum(estimate_tokens(f"message number {i}") for i in range(100))
    assert result["pending_tokens"] == expected
    state = ok(ov_http.get(f"/api/v1/sessions/{s}"))
    assert state["message_count"] == 100 and state["total_message_count"] == 100


@pytest.mark.parametrize(
    "text",
    [
        "I prefer dark roast coffee in the morning.",
        "你好世界，今天天气很好。",
        "emoji 😀 and 🎉 mixed",
        "mixed 日本語 かな 한국어 text 😀",
        "x",
    ],
)
def test_pending_tokens_matches_local_estimate(ov_http: httpx.Client, text: str) -> None:
    s = sid("tokens")
    first = ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", text)))
    assert first["pending_tokens"] == estimate_tokens(text)
    # rounding is per message, not over the session's concatenated text
    second = ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("assistant", text)))
    assert second["pending_tokens"] == 2 * estimate_tokens(text)
    assert ok(ov_http.get(f"/api/v1/sessions/{s}"))["pending_tokens"] == 2 * estimate_tokens(text)


def test_pending_tokens_of_tool_and_context_parts(ov_http: httpx.Client) -> None:
    s = sid("toolparts")
    tool = {
        "type": "tool",
        "tool_id": "call_1",
        "tool_name": "read",
        "tool_input": {"path": "/x", "n": 2},
        "tool_output": "hello world",
        "tool_status": "completed",
    }
    r = ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json={"role": "assistant", "parts": [tool]}))
    # tool_id + tool_name + json.dumps(input) (Python's default separators) + output
    assert r["pending_tokens"] == estimate_tokens('call_1read{"path": "/x", "n": 2}hello world')
    ctx_part = {
        "type": "context",
        "uri": "viking://user/default/memories/x.md",
        "context_type": "memory",
        "abstract": "an abstract",
    }
    r2 = ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json={"role": "user", "parts": [ctx_part]}))
    assert r2["pending_tokens"] - r["pending_tokens"] == estimate_tokens("an abstract")


def test_delete_session(ov_http: httpx.Client) -> None:
    s = sid("delete")
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "bye")))
    assert ok(ov_http.delete(f"/api/v1/sessions/{s}")) == {"session_id": s}
    err(ov_http.get(f"/api/v1/sessions/{s}"), 404, "NOT_FOUND")


def test_fs_delete_of_missing_uri_is_ok_with_zero(ov_http: httpx.Client) -> None:
    r = ok(ov_http.delete("/api/v1/fs", params={"uri": "viking://user/default/memories/nope.md", "recursive": "false"}))
    assert r["estimated_deleted_count"] == 0


# --- API-key mode -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(ov_keyed_server) -> dict[str, Any]:
    """Root client plus two users of one fresh account on the API-key server."""
    client = httpx.Client(base_url=ov_keyed_server.url, timeout=60.0, trust_env=False)
    account = sid("acct")
    root = {"X-API-Key": ov_keyed_server.root_api_key}
    alice = ok(
        client.post("/api/v1/admin/accounts", headers=root, json={"account_id": account, "admin_user_id": "alice"})
    )
    bob = ok(
        client.post(f"/api/v1/admin/accounts/{account}/users", headers=root, json={"user_id": "bob", "role": "user"})
    )
    try:
        yield {"client": client, "account": account, "alice": alice, "bob": bob, "root": root}
    finally:
        client.close()


def test_api_key_mode_auth_errors(keyed: dict[str, Any]) -> None:
    c = keyed["client"]
    assert c.get("/health").json()["auth_mode"] == "api_key"
    err(c.post("/api/v1/sessions", json={}), 401, "UNAUTHENTICATED")
    err(c.post("/api/v1/sessions", json={}, headers={"X-API-Key": "wrong"}), 401, "UNAUTHENTICATED")
    root = keyed["root"]
    err(c.post("/api/v1/sessions", json={}, headers=root), 403, "PERMISSION_DENIED")
    err(
        c.post(
            "/api/v1/search/find", headers=root, json={"query": "x", "target_uri": "viking://~/memories", "limit": 3}
        ),
        403,
        "PERMISSION_DENIED",
    )


def test_api_key_mode_rejects_old_user_memories_uri(keyed: dict[str, Any]) -> None:
    r = keyed["client"].post(
        "/api/v1/search/find",
        headers={"X-API-Key": keyed["alice"]["user_key"]},
        json={"query": "coffee", "target_uri": "viking://user/memories", "limit": 5},
    )
    error = err(r, 400, "INVALID_URI")
    assert error["details"]["uri"] == "viking://user/memories"
    assert "viking://~/memories" in error["message"]


def test_api_key_users_are_isolated(keyed: dict[str, Any]) -> None:
    c, account = keyed["client"], keyed["account"]
    alice = {"X-API-Key": keyed["alice"]["user_key"]}
    bob = {"Authorization": f"Bearer {keyed['bob']['user_key']}"}
    assert keyed["alice"]["account_id"] == account and keyed["bob"]["user_id"] == "bob"
    a = ok(c.post("/api/v1/sessions", json={"session_id": "shared"}, headers=alice))
    assert a["uri"] == "viking://user/alice/sessions/shared"
    assert a["user"] == {"account_id": account, "user_id": "alice"}
    ok(c.post("/api/v1/sessions/shared/messages", json=text_msg("user", "alice only"), headers=alice))
    err(c.get("/api/v1/sessions/shared", headers=bob), 404, "NOT_FOUND")
    b = ok(c.post("/api/v1/sessions", json={"session_id": "shared"}, headers=bob))
    assert b["uri"] == "viking://user/bob/sessions/shared"
    assert ok(c.get("/api/v1/sessions/shared", headers=bob))["message_count"] == 0
    assert ok(c.get("/api/v1/sessions/shared", headers=alice))["message_count"] == 1
    err(
        c.post(
            "/api/v1/search/find",
            headers=bob,
            json={"query": "alice", "target_uri": "viking://user/alice/memories", "limit": 3},
        ),
        403,
        "PERMISSION_DENIED",
    )
    own = ok(
        c.post(
            "/api/v1/search/find", headers=bob, json={"query": "alice", "target_uri": "viking://~/memories", "limit": 3}
        )
    )
    assert all("/user/bob/" in h["uri"] for h in own["memories"])


def test_estimate_helper_is_the_weighted_ceiling() -> None:
    # guards the arithmetic the tier's token assertions lean on
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("你") == 2 and estimate_tokens("😀") == 2
    assert estimate_tokens("😀😀a") == math.ceil(4.25)


def test_a_user_message_of_only_tool_parts_is_stored_as_one_message_per_part(ov_http: httpx.Client) -> None:
    """The premise of capture's exactly-once count (``added`` and ``total_message_count``
    move by what OV stored, not by what was sent), and of the fake's split."""
    s = sid("toolonly")
    parts = [
        {"type": "tool", "tool_id": f"c{i}", "tool_name": "read", "tool_output": f"out {i}", "tool_status": "completed"}
        for i in range(3)
    ]
    added = ok(
        ov_http.post(f"/api/v1/sessions/{s}/messages/batch", json={"messages": [{"role": "user", "parts": parts}]})
    )
    state = ok(ov_http.get(f"/api/v1/sessions/{s}"))
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    assert added["added"] == 3 and state["message_count"] == 3 and state["total_message_count"] == 3
    assert [(m["role"], [p.get("tool_id") for p in m["parts"]]) for m in ctx["messages"]] == [
        ("user", ["c0"]),
        ("user", ["c1"]),
        ("user", ["c2"]),
    ]
