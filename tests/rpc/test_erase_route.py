"""``POST /v1/erase`` (workers.rpc.erase): a caller erases its own tenant, never another's, and
gets the receipt; a bad body is a 4xx with a message. Real redis-server, the fake OV in API-key
mode."""

from __future__ import annotations

from typing import Any

import pytest

from core.ids import ov_session_id
from core.session import scope_of, shard_of
from workers.dev.fake_ov.app import FakeOV
from workers.store.keys import Keys

pytestmark = pytest.mark.redis

KEYS = {"alice": "key-alice-0123456789", "bob": "key-bob-0123456789ab"}


async def test_a_caller_erases_its_own_tenant_and_no_other(make_rpc: Any) -> None:
    fake = FakeOV(api_keys={key: ("acct", user) for user, key in KEYS.items()})
    rpc = await make_rpc(fake, user_api_keys=dict(KEYS), erase_settle_s=0)
    keys = Keys(rpc.settings.key_prefix)

    def applied(user: str) -> str:
        sid = ov_session_id(f"{user}-s", None)
        return keys.applied(shard_of(sid, rpc.settings.shards), scope_of(user, "main"), sid)

    for user, key in KEYS.items():  # each tenant: what capture keeps of a session, and an answer's trace
        rpc.mark_captured(ov_session_id(f"{user}-s", None), 0, user=user)
        body = {"sessionId": f"{user}-s", "messages": [{"role": "user", "content": f"{user} says hello there"}]}
        assert (await rpc.assemble(body, **{"X-OpenViking-API-Key": key})).status_code == 200
    as_alice = {"X-OpenViking-API-Key": KEYS["alice"]}
    dry = await rpc.client.post("/v1/erase", json={"dryRun": True}, headers=as_alice)
    assert dry.status_code == 200 and dry.json()["dry_run"] is True and dry.json()["removed"]["redis_keys"] >= 1
    assert rpc.redis.exists(applied("alice"))  # a dry run changes nothing
    done = await rpc.client.post("/v1/erase", json={}, headers=as_alice)
    assert done.status_code == 200, done.text
    assert done.json()["kind"] == "user" and done.json()["removed"]["redis_keys"] >= 1
    assert not rpc.redis.exists(applied("alice")) and rpc.redis.exists(applied("bob"))


@pytest.mark.parametrize(
    ("body", "field"),
    [({"agentId": "main", "sessionId": "s"}, "not both"), ({"dryRun": "maybe"}, "dryRun"), ({"user": "bob"}, "user")],
)
async def test_a_bad_erase_is_a_4xx_with_a_message(rpc: Any, body: dict[str, Any], field: str) -> None:
    r = await rpc.client.post("/v1/erase", json=body)
    assert r.status_code in (400, 422) and field in r.text, r.text
