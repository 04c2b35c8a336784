"""``ovstream erase`` (workers.erasure) on a real Redis with the fake OV in API-key mode: a user
erased leaves no Redis key naming their sessions and no value holding their text, nothing in OV,
keeps another user's; a run killed mid-way and run again completes; a dry run changes nothing;
turns of the user published afterwards are dropped unapplied."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from core.config import Settings
from core.erasure import ErasureScope
from core.events import TurnEvent
from core.ids import ov_session_id
from core.session import SessionAddress
from tests.helpers.capture import make_worker, publish, run_until
from tests.helpers.redis_dump import key_names, values
from workers.capture.erased import Tombstones
from workers.commits import context as jobs
from workers.commits.request import request_commit
from workers.commits.worker import drain_jobs
from workers.dev.fake_ov.app import FakeOV
from workers.erasure.run import erase_with, tenant_of
from workers.store.keys import Keys

KEYS = {"alice": "key-alice-0123456789", "bob": "key-bob-0123456789ab"}
ALICE_SAID = "alice-private-words: I prefer oolong tea and my flat is on Rue Lepic"
BOB_SAID = "bob-private-words: I prefer black coffee"


@pytest.fixture
def keyed(settings: Settings) -> tuple[Settings, FakeOV]:
    fake = FakeOV(api_keys={key: ("acct", user) for user, key in KEYS.items()})
    transport = fake.transport()
    jobs.set_ov_transport_factory(lambda _s: transport)
    keyed = settings.model_copy(update={"user_api_keys": dict(KEYS), "api_key": None})
    jobs.register(keyed)
    return keyed, fake


def _turn(user: str, session: str, agent: str, said: str, n: int = 0) -> TurnEvent:
    messages = [{"role": "user", "content": f"{said} ({n})"}, {"role": "assistant", "content": "Noted."}]
    return TurnEvent(
        event_id=f"{user}-{session}-{n}",
        session_id=session,
        agent_id=agent,
        messages=messages,
        published_at=1.0,
        user=user,
    )


async def _erase(settings: Settings, scope: ErasureScope, key: str | None, **options: Any) -> Any:
    """The CLI's erase (a loop of its own), on a thread beside the test's loop."""
    return await asyncio.to_thread(lambda: erase_with(settings, scope, key, **options))


def _sessions(fake: FakeOV, user: str) -> set[str]:
    return set(fake.tenant("acct", user).sessions)


def _dump(redis_client: Any) -> tuple[set[str], bytes]:
    return key_names(redis_client), values(redis_client)


async def test_a_user_erased_leaves_nothing_of_them_and_all_of_another(redis_client, keyed) -> None:
    settings, fake = keyed
    worker = make_worker(settings, fake)
    turns = [
        _turn("alice", "a-main", "main", ALICE_SAID),
        _turn("alice", "a-coder", "coder", ALICE_SAID),
        _turn("bob", "b-main", "main", BOB_SAID),
    ]
    publish(redis_client, settings, turns)
    await run_until([worker], lambda: all(_sessions(fake, u) for u in ("alice", "bob")))
    for user, sid in (("alice", "a-main"), ("bob", "b-main")):
        request_commit(redis_client, settings, SessionAddress(sid, "main", user), reason="manual", keep_recent_count=0)
    assert drain_jobs(redis_client, settings)
    alice_sids = {ov_session_id(t.session_id, None) for t in turns[:2]}
    assert _sessions(fake, "alice") == alice_sids and [
        e for e in fake.memories("acct", "alice") if "oolong" in e.content
    ]

    # a dry run counts, and changes nothing
    names_before, _ = _dump(redis_client)
    tenant, key = tenant_of(settings, "alice")
    dry = await _erase(settings, ErasureScope(tenant), key, transport=fake.transport(), dry_run=True)
    assert dry.removed["ov_sessions"] == 2 and dry.removed["redis_keys"] > 0, dry
    assert _dump(redis_client)[0] == names_before and _sessions(fake, "alice") == alice_sids

    # killed after the first pass removed OV's side, then run again: it completes
    def killed(step: str) -> None:
        if step == "pass0-ov-done":
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        await _erase(settings, ErasureScope(tenant), key, transport=fake.transport(), settle_s=0.0, fault=killed)
    receipt = await _erase(settings, ErasureScope(tenant), key, transport=fake.transport(), settle_s=0.0)
    assert receipt.runs == 2 and receipt.removed["ov_sessions"] == 2 and receipt.removed["redis_keys"] > 0, receipt

    assert _sessions(fake, "alice") == set() and not [
        e for e in fake.memories("acct", "alice") if "oolong" in e.content
    ]
    assert _sessions(fake, "bob") == {"b-main"} and [
        e for e in fake.memories("acct", "bob") if "black coffee" in e.content
    ]
    names, values = _dump(redis_client)
    assert not [n for n in names if any(sid in n for sid in alice_sids)], names
    assert b"alice-private-words" not in values and b"bob-private-words" in values
    assert any("b-main" in n for n in names)
    audit = redis_client.xrange(Keys(settings.key_prefix).erasures())
    assert audit and b"alice" not in repr(audit).encode()  # who was erased is a digest

    # the user's turns published afterwards are dropped unapplied, the other's applied
    publish(
        redis_client,
        settings,
        [_turn("alice", "a-main", "main", ALICE_SAID, 1), _turn("bob", "b-main", "main", BOB_SAID, 1)],
    )
    later = make_worker(settings, fake, burst=True)
    await later.run()
    assert _sessions(fake, "alice") == set()
    assert b"alice-private-words" not in _dump(redis_client)[1]
    assert len(fake.tenant("acct", "bob").sessions["b-main"].messages) >= 2


async def test_an_agent_or_a_session_erased_leaves_the_users_other_sessions(redis_client, keyed) -> None:
    settings, fake = keyed
    worker = make_worker(settings, fake)
    publish(
        redis_client,
        settings,
        [
            _turn("alice", "a-main", "main", ALICE_SAID),
            _turn("alice", "a-coder", "coder", ALICE_SAID),
            _turn("alice", "a-two", "main", ALICE_SAID),
        ],
    )
    await run_until([worker], lambda: len(_sessions(fake, "alice")) == 3)
    tenant, key = tenant_of(settings, "alice")
    by_agent = await _erase(
        settings, ErasureScope(tenant, agent="coder"), key, transport=fake.transport(), settle_s=0.0
    )
    assert by_agent.removed["ov_sessions"] == 1 and _sessions(fake, "alice") == {"a-main", "a-two"}
    await _erase(settings, ErasureScope(tenant, session="a-two"), key, transport=fake.transport(), settle_s=0.0)
    assert _sessions(fake, "alice") == {"a-main"}
    names, _ = _dump(redis_client)
    assert any("a-main" in n for n in names) and not any("a-two" in n or "a-coder" in n for n in names)


def test_who_can_be_erased() -> None:
    settings = Settings(user_api_keys=dict(KEYS), user="ops")
    assert tenant_of(settings, "alice") == ("alice", KEYS["alice"])
    assert tenant_of(settings, "ops") == (None, None)
    with pytest.raises(ValueError, match="no user 'mallory'"):
        tenant_of(settings, "mallory")
    with pytest.raises(ValueError, match="not both"):
        ErasureScope("alice", agent="main", session="s")


async def test_no_shard_of_a_worker_goes_on_before_its_read_of_the_tombstones() -> None:
    class SlowRedis:
        def __init__(self) -> None:
            self.answer = asyncio.Event()

        async def hgetall(self, key: str) -> dict[bytes, bytes]:
            await self.answer.wait()
            return {b"digest": str(time.time() + 60).encode()}

    tombstones, redis_client, settings = Tombstones(), SlowRedis(), Settings()
    shards = [asyncio.create_task(tombstones.refresh(redis_client, settings)) for _ in range(2)]  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not any(s.done() for s in shards)  # each waits for a read
    redis_client.answer.set()
    await asyncio.gather(*shards)
    assert set(tombstones._until) == {"digest"}


async def test_a_read_of_the_tombstones_that_hangs_holds_a_round_half_a_second_at_most() -> None:
    class HungRedis:
        async def hgetall(self, key: str) -> dict[bytes, bytes]:
            await asyncio.sleep(3600)
            return {}

    tombstones, started = Tombstones(), time.monotonic()
    await tombstones.refresh(HungRedis(), Settings())  # type: ignore[arg-type]
    await tombstones.refresh(HungRedis(), Settings())  # type: ignore[arg-type]  # the view stands: no second wait
    assert time.monotonic() - started < 30.0  # a guard: it waited for no hung read (3,600 s)
