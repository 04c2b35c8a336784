"""The in-memory OV fake: API-key auth, dev-mode identity and the fault knobs."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from tests.helpers.fake_ov import S, add, error, http, ok, texts
from workers.dev.fake_ov.app import FakeOV

# --- auth --------------------------------------------------------------------------------


async def test_api_key_mode():
    fake = FakeOV(api_keys={"ka": ("acme", "alice"), "kb": ("acme", "bob")}, root_key="root")
    async with http(fake) as anon:
        await error(anon.get(f"{S}/s"), 401, "UNAUTHENTICATED")
        assert (await anon.get("/health")).json()["status"] == "ok"  # health needs no key
    async with http(fake, **{"X-API-Key": "wrong"}) as c:
        await error(c.get(f"{S}/s"), 401, "UNAUTHENTICATED")
    async with http(fake, **{"X-API-Key": "root"}) as root:
        await error(root.get(f"{S}/s"), 403, "PERMISSION_DENIED")
        made = await ok(root.post("/api/v1/admin/accounts", json={"account_id": "org", "admin_user_id": "boss"}))
        await error(
            root.post("/api/v1/admin/accounts", json={"account_id": "org", "admin_user_id": "x"}), 409, "ALREADY_EXISTS"
        )
    async with http(fake, Authorization=f"Bearer {made['user_key']}") as boss:
        user = await ok(boss.post("/api/v1/admin/accounts/org/users", json={"user_id": "carol"}))
        await error(
            boss.post("/api/v1/admin/accounts", json={"account_id": "o2", "admin_user_id": "b"}),
            403,
            "PERMISSION_DENIED",
        )
    async with http(fake, **{"X-API-Key": user["user_key"]}) as carol:
        await add(carol, "s", "carol's")
        await error(carol.post("/api/v1/admin/accounts/org/users", json={"user_id": "dave"}), 403, "PERMISSION_DENIED")
    async with http(fake, **{"X-API-Key": "ka", "X-OpenViking-User": "bob"}) as alice:
        await add(alice, "s", "alice's")
        await error(alice.get("/api/v1/tasks/whatever"), 404, "NOT_FOUND")
    assert texts(fake.tenant("org", "carol").sessions["s"].messages) == ["carol's"]
    assert texts(fake.tenant("acme", "alice").sessions["s"].messages) == ["alice's"]
    assert ("acme", "bob") not in fake.tenants or not fake.tenant("acme", "bob").sessions


async def test_dev_mode_identity_headers():
    fake = FakeOV()
    async with http(fake, **{"X-OpenViking-Account": "a1", "X-OpenViking-User": "u1"}) as c:
        out = await ok(c.post(S, json={"session_id": "s"}))
        assert out["uri"] == "viking://user/u1/sessions/s"
    assert "s" in fake.tenant("a1", "u1").sessions and "s" not in fake.sessions


# --- fault knobs -------------------------------------------------------------------------


async def test_fail_next_down_and_call_log():
    fake = FakeOV()
    async with http(fake) as c:
        fake.fail_next(2)
        await error(c.get("/health"), 503, "UNAVAILABLE")
        await error(c.get(f"{S}/s", params={"auto_create": "true"}), 503, "UNAVAILABLE")
        assert (await c.get("/health")).status_code == 200
        fake.fail_next(1, status=500, code="INTERNAL", route="commit")
        await add(c, "s", "x")  # not a commit: unaffected
        await error(c.post(f"{S}/s/commit"), 500, "INTERNAL")
        assert (await ok(c.post(f"{S}/s/commit")))["status"] == "accepted"
        fake.down = True
        with pytest.raises(httpx.ConnectError):
            await c.get("/health")
        fake.down = False
    assert fake.calls[:2] == [("GET", "/health"), ("GET", f"{S}/s")]
    assert fake.calls.count(("POST", f"{S}/s/commit")) == 2
    assert len(fake.requests) == len(fake.calls)


async def test_latency_makes_the_answer_await_a_sleep(monkeypatch):
    slept: list[float] = []

    async def fake_sleep(d: float) -> None:
        slept.append(d)

    monkeypatch.setattr("workers.dev.fake_ov.app.asyncio.sleep", fake_sleep)
    fake = FakeOV()
    fake.latency_s = {"find": 7.0}
    async with http(fake) as c:
        await ok(c.post("/api/v1/search/find", json={"query": "x"}))
        await c.get("/health")
    assert slept == [7.0]
    fake.latency_s = 2.5
    req = httpx.Request("GET", "http://ov/health")
    pending = fake.handle(req)
    assert asyncio.iscoroutine(pending)
    assert (await pending).status_code == 200 and slept == [7.0, 2.5]


async def test_sync_client_works_without_latency():
    fake = FakeOV()
    with httpx.Client(transport=fake.transport(), base_url="http://ov") as c:
        r = c.post(f"{S}/s/messages", json={"role": "user", "content": "sync"})
    assert r.json()["result"]["message_count"] == 1


async def test_asgi_app_serves_the_same_api():
    fake = FakeOV()
    transport = httpx.ASGITransport(app=fake.asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://ov") as c:
        await ok(c.post(f"{S}/a%2Fb/messages", json={"role": "user", "content": "via asgi"}))
        await error(c.get(f"{S}/missing"), 404, "NOT_FOUND")
    assert texts(fake.sessions["a/b"].messages) == ["via asgi"]


def test_token_weights_match_math():
    # 3 CJK (1.5 each) + 1 ASCII (0.25) = 4.75 -> 5
    from workers.dev.fake_ov.state import message_tokens

    assert message_tokens({"parts": [{"type": "text", "text": "你好吗a"}]}) == math.ceil(4.75)
    tool = {"type": "tool", "tool_id": "ab", "tool_name": "cd", "tool_input": {"k": 1}, "tool_output": "ef"}
    # "ab" + "cd" + '{"k": 1}' + "ef" + the context abstract "gh" = 16 chars -> 4 tokens
    assert message_tokens({"parts": [tool, {"type": "context", "abstract": "gh", "uri": "u"}]}) == 4
