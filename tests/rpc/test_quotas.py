"""Per-tenant quotas (issue 58, item 2): over its limit a tenant's assemble, tool call or
commit is answered 429 with Retry-After and a message naming the limit; other tenants go on;
a tenant without a limit pays nothing. Real redis-server, the fake OV in API-key mode; the
quota's clock fixed (a window's edge between two calls would prove nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from core.config import Settings
from core.config_names import ConfigError
from tests.helpers.rpc import running_worker
from tests.rpc.test_compact import turns
from workers.dev.fake_ov.app import FakeOV
from workers.rpc import quotas
from workers.store.usage import TALLY, flush, read_usage

pytestmark = pytest.mark.redis

KEYS = {"alice": "key-alice-0123456789", "bob": "key-bob-0123456789ab"}
QUOTAS = {"*": {"assemblesPerS": 2, "commitsPerMin": 1}, "bob": {"toolCallsPerS": 1}}


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1_800_000_000.25]  # a quarter of a second into a second, 0.25 s into a minute
    monkeypatch.setattr(quotas, "clock", lambda: now[0])
    return now


def _as(user: str) -> dict[str, str]:
    return {"X-OpenViking-API-Key": KEYS[user]}


def _assemble(user: str, i: int) -> dict[str, Any]:
    return {"sessionId": f"{user}-s", "messages": [{"role": "user", "content": f"{user} asks question {i}"}]}


async def test_over_its_quota_a_tenant_hears_429_and_others_go_on(make_rpc: Any, fixed_clock: list[float]) -> None:
    fake = FakeOV(api_keys={key: ("acct", user) for user, key in KEYS.items()})
    rpc = await make_rpc(fake, user_api_keys=dict(KEYS), tenant_quotas=QUOTAS)
    TALLY.take()
    for i in range(2):
        assert (await rpc.assemble(_assemble("alice", i), **_as("alice"))).status_code == 200
    refused = await rpc.assemble(_assemble("alice", 2), **_as("alice"))
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"] == "1"  # the second's end, 0.75 s away
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert (
        "alice" in error["message"]
        and "2 assembles a second" in error["message"]
        and "tenantQuotas" in error["message"]
    )
    # bob has an entry of his own: no assemble limit (the "*" entry is for tenants without one)
    for i in range(5):
        assert (await rpc.assemble(_assemble("bob", i), **_as("bob"))).status_code == 200
    # tool calls: bob's own limit
    recall = {"sessionId": "bob-s", "params": {"query": "what does bob like"}}
    assert (await rpc.tool("memory_recall", recall, **_as("bob"))).status_code == 200
    over = await rpc.tool("memory_recall", recall, **_as("bob"))
    assert over.status_code == 429 and "1 tool calls a second" in over.json()["error"]["message"]
    # the next second: alice may again
    fixed_clock[0] += 1
    assert (await rpc.assemble(_assemble("alice", 3), **_as("alice"))).status_code == 200
    flush(rpc.redis, rpc.settings)
    [today] = read_usage(rpc.redis, rpc.settings, "day", 1).values()
    assert today["alice"]["quota_refusals"] == 1 and today["bob"]["quota_refusals"] == 1
    assert today["alice"]["assembles"] == 3  # the refused one is not an assemble


async def test_commits_over_the_minutes_quota_are_refused(make_rpc: Any, fixed_clock: list[float]) -> None:
    fake = FakeOV(api_keys={key: ("acct", user) for user, key in KEYS.items()})
    rpc = await make_rpc(fake, user_api_keys=dict(KEYS), tenant_quotas=QUOTAS)
    for sid in ("alice-1", "alice-2"):
        await rpc.ov.scoped(api_key=KEYS["alice"]).add_messages(sid, turns(4))
    with running_worker(rpc):
        first = await rpc.compact({"sessionId": "alice-1"}, **_as("alice"))
        assert first.status_code == 200 and first.json()["compacted"] is True, first.text
        second = await rpc.compact({"sessionId": "alice-2"}, **_as("alice"))
    assert second.status_code == 429 and int(second.headers["Retry-After"]) == 60  # 59.75 s, rounded up
    assert "1 commits a minute" in second.json()["error"]["message"]


def test_quotas_are_checked_at_load() -> None:
    settings = Settings(tenant_quotas={"*": {"assemblesPerS": 5}, "acme": {"commits_per_min": 3}})
    assert settings.quota_for("anyone", "assembles") == 5 and settings.quota_for("anyone", "commits") is None
    assert settings.quota_for("acme", "commits") == 3 and settings.quota_for("acme", "assembles") is None
    assert Settings().quota_for(None, "assembles") is None
    for bad in ({"*": {"assemblesPerS": 0}}, {"*": {"assemblesPerMinute": 5}}):
        with pytest.raises((ValueError, ConfigError)):
            Settings(tenant_quotas=bad)
