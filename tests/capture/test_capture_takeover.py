"""Shard takeover: the lease's new holder owns every pending entry at once, and a consumer
that lost the lease (stalled past it: a GC pause, SIGSTOP) can no longer write."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from core.session import SessionAddress
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from workers.capture.fence import HashWrite, ShardFence
from workers.capture.plan import LeaseLost
from workers.capture.worker import CaptureWorker, WorkerKilled
from workers.store.applied import INTENT, LAST_ID
from workers.store.connection import connect_async
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys, session_keys, shard_of
from workers.store.scripts import CAPTURE_LEASE_RENEW, LEASE_ACQUIRE, LEASE_RELEASE

SID = "fenced"


def _shard(settings) -> int:
    return shard_of(SID, settings.shards)


def _held(worker) -> set[int]:
    return {s.number for s in worker.consumers}


def _lease(settings) -> str:
    return Keys(settings.key_prefix).capture_lease(_shard(settings))


def _applied(redis_client, settings) -> dict[str, str]:
    key = session_keys(settings, SessionAddress(SID, "main", None)).applied
    return {k.decode(): v.decode() for k, v in redis_client.hgetall(key).items()}


def _steal(redis_client, settings) -> None:
    """Another consumer takes the shard, as after this one's lease expired, and keeps it (a live
    owner renews): the victim cannot win it back before the test looks (a loaded machine let
    the victim's own lifetime on the key run out first, and it took the shard again)."""
    redis_client.hset(_lease(settings), mapping={"id": "usurper", "data": ""})
    redis_client.pexpire(_lease(settings), 60_000)


async def test_the_new_owner_claims_pending_entries_as_soon_as_it_wins_the_lease(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn(SID, t) for t in range(3)])

    def die(step: str) -> None:
        if step == "before_write":
            raise WorkerKilled(step)

    victim = make_worker(settings, fake_ov, consumer="victim", fault_hook=die, lease_ms=600_000)
    [ended] = await run_until([victim], lambda: False, timeout_s=20)
    assert isinstance(ended, WorkerKilled) and pending_count(redis_client, settings) == 3
    redis_client.delete(_lease(settings))  # the lease ran out: the entries are idle for milliseconds only
    heir = make_worker(settings, fake_ov, consumer="heir", burst=True)
    async with asyncio.timeout(20):  # an idle-time rule (the old XAUTOCLAIM) would wait a minute here
        await heir.run()
    assert heir.stats.claimed == 3
    assert ov_texts(fake_ov, SID) == expected_texts(SID, 3)
    assert pending_count(redis_client, settings) == 0


async def test_a_consumer_that_lost_its_lease_after_writing_cannot_ack(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn(SID, t) for t in range(2)])
    stolen = asyncio.Event()

    def stall_past_the_lease(step: str) -> None:
        if step == "after_write" and not stolen.is_set():
            _steal(redis_client, settings)
            stolen.set()

    victim = make_worker(settings, fake_ov, consumer="victim", fault_hook=stall_past_the_lease)
    await run_until([victim], lambda: stolen.is_set() and _shard(settings) not in _held(victim), timeout_s=20)
    assert ov_texts(fake_ov, SID) == expected_texts(SID, 2)  # OV took the write (no way to fence it)
    applied = _applied(redis_client, settings)
    assert INTENT in applied and LAST_ID not in applied  # the ack was refused: the intent stays
    assert pending_count(redis_client, settings) == 2

    redis_client.delete(_lease(settings))
    heir = make_worker(settings, fake_ov, consumer="heir", burst=True)
    async with asyncio.timeout(20):
        await heir.run()
    assert ov_texts(fake_ov, SID) == expected_texts(SID, 2)  # settled from OV's count: nothing twice
    assert heir.stats.ov_writes == 0 and pending_count(redis_client, settings) == 0
    assert INTENT not in _applied(redis_client, settings)


class _StealOnRead(httpx.AsyncBaseTransport):
    """Hands the shard to another consumer while the round reads OV's message count."""

    def __init__(self, inner: httpx.AsyncBaseTransport, steal) -> None:
        self.inner, self.steal, self.stolen = inner, steal, False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith(f"/sessions/{SID}") and not self.stolen:
            self.steal()
            self.stolen = True
        return await self.inner.handle_async_request(request)


async def test_a_consumer_that_lost_its_lease_records_no_intent_and_writes_nothing(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn(SID, 0)])
    transport = _StealOnRead(fake_ov.transport(), lambda: _steal(redis_client, settings))
    victim = CaptureWorker(settings, ov_transport=transport, consumer="victim", lease_ms=600)
    await run_until(
        [victim],
        lambda: transport.stolen and _shard(settings) not in _held(victim),
        timeout_s=20,
    )
    assert ov_texts(fake_ov, SID) == []
    assert INTENT not in _applied(redis_client, settings)
    assert pending_count(redis_client, settings) == 1


def _one_pending_entry(redis_client, settings) -> tuple[int, str, str, str]:
    """A shard with one entry pending for the consumer "before": (shard, stream, lease, entry id)."""
    shard = shard_of(SID, settings.shards)
    keys = Keys(settings.key_prefix)
    stream = keys.stream(shard)
    redis_client.xgroup_create(stream, settings.consumer_group, id="0", mkstream=True)
    entry = redis_client.xadd(stream, {"e": "1"}).decode()
    redis_client.xreadgroup(settings.consumer_group, "before", {stream: ">"})
    return shard, stream, keys.capture_lease(shard), entry


@pytest.mark.parametrize("holder", ["usurper", None])
async def test_fenced_writes_are_refused_whole_unless_the_lease_is_ours(redis_client, settings, holder):
    shard, stream, lease, entry = _one_pending_entry(redis_client, settings)
    if holder is not None:
        redis_client.hset(lease, mapping={"id": holder, "data": ""})
    target = Keys(settings.key_prefix).applied(shard, "main", SID)
    redis = connect_async(settings)
    try:
        fence = ShardFence(redis, shard, stream, lease, settings.consumer_group, "me")
        with pytest.raises(LeaseLost):
            await fence.claim([entry])
        with pytest.raises(LeaseLost):
            await fence.apply([HashWrite(target, {LAST_ID: entry})], [entry])
    finally:
        await redis.aclose()
    assert redis_client.hgetall(target) == {}
    [row] = redis_client.xpending_range(stream, settings.consumer_group, "-", "+", 10)
    assert row["consumer"] == b"before"


async def test_fenced_writes_go_through_while_the_lease_is_ours(redis_client, settings):
    shard, stream, lease, entry = _one_pending_entry(redis_client, settings)
    target = Keys(settings.key_prefix).applied(shard, "main", SID)
    redis_client.hset(target, INTENT, "{}")
    redis = connect_async(settings)
    try:
        await LEASE_ACQUIRE.run(redis, [lease], ["me", 60_000, ""])
        fence = ShardFence(redis, shard, stream, lease, settings.consumer_group, "me")
        [[claimed_id, fields]] = await fence.claim([entry])
        assert claimed_id.decode() == entry and fields == [b"e", b"1"]
        [row] = redis_client.xpending_range(stream, settings.consumer_group, "-", "+", 10)
        assert row["consumer"] == b"me" and row["times_delivered"] == 2
        await fence.apply([HashWrite(target, {LAST_ID: entry}, (INTENT,))], [entry])
    finally:
        await redis.aclose()
    assert {k.decode(): v.decode() for k, v in redis_client.hgetall(target).items()} == {LAST_ID: entry}
    assert redis_client.xpending(stream, settings.consumer_group)["pending"] == 0


class _LateWrite(httpx.AsyncBaseTransport):
    """The first message write times out for the client, and OV applies it right after it
    answers the next read of the session (a frozen OV working off the requests it holds once it
    wakes): a settle reads OV's count once without the write; a second read, later, with it.
    Released by that read, not after a delay: on a loaded machine a delay let the settle's
    first read come after the write, and the hazard this shows did not happen."""

    def __init__(self, inner: httpx.AsyncBaseTransport, session: str) -> None:
        self.inner, self.session = inner, session
        self.held: httpx.Request | None = None
        self.applied = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/messages/batch") and self.held is None and not self.applied.is_set():
            await request.aread()
            self.held = request
            raise httpx.ReadTimeout("OV did not answer", request=request)
        response = await self.inner.handle_async_request(request)
        if self.held is not None and request.method == "GET" and self.session in request.url.path:
            held, self.held = self.held, None
            await self.inner.handle_async_request(held)  # after the read's answer was made
            self.applied.set()
        return response


@pytest.mark.parametrize(("recheck_s", "copies"), [(0.0, 2), (0.5, 1)])
async def test_a_write_applied_after_its_timeout_is_settled_once(redis_client, settings, fake_ov, recheck_s, copies):
    """With the settle's second read (recheck 0.5 s) the late write is seen and not repeated;
    without it (0) the same sequence stores the turn twice: the hazard the recheck is for."""
    patient = settings.model_copy(update={"capture_settle_recheck_s": recheck_s})
    publish(redis_client, patient, [turn(SID, 0)])
    transport = _LateWrite(fake_ov.transport(), SID)
    worker = CaptureWorker(patient, ov_transport=transport, consumer="w", lease_ms=600)
    await run_until([worker], lambda: transport.applied.is_set() and pending_count(redis_client, patient) == 0)
    assert ov_texts(fake_ov, SID) == expected_texts(SID, 1) * copies


# --- slowness is not poison (docs/FAILURE-MODES.md: what counts toward maxDeliveries) ---------------


async def test_a_lapsed_lease_nobody_took_is_taken_back_by_the_write(redis_client, settings):
    """A consumer frozen past its lease (SIGSTOP, a starved machine) carries on when nobody took
    the shard meanwhile; once anybody did, even one that gave it back, its writes are refused."""
    shard, stream, lease, entry = _one_pending_entry(redis_client, settings)
    keys = Keys(settings.key_prefix)
    epoch_key = keys.capture_lease_epoch(shard)
    target = keys.applied(shard, "main", SID)
    redis = connect_async(settings)
    try:
        _, epoch = await LEASE_ACQUIRE.run(redis, [lease, epoch_key], ["me", 60_000, ""])
        fence = ShardFence(redis, shard, stream, lease, settings.consumer_group, "me", epoch_key, epoch.decode(), 5000)
        redis_client.delete(lease)  # lapsed
        [[claimed_id, _]] = await fence.claim([entry])
        assert claimed_id.decode() == entry
        assert redis_client.hget(lease, "id") == b"me" and 0 < redis_client.pttl(lease) <= 5000  # taken back
        redis_client.delete(lease)
        await LEASE_ACQUIRE.run(redis, [lease, epoch_key], ["other", 60_000, ""])  # another took it ...
        await LEASE_RELEASE.run(redis, [lease, epoch_key], ["other"])  # ... and gave it back
        with pytest.raises(LeaseLost):
            await fence.apply([HashWrite(target, {LAST_ID: entry})], [entry])
        assert await CAPTURE_LEASE_RENEW.run(redis, [lease, epoch_key], ["me", epoch.decode(), 5000]) == 0
    finally:
        await redis.aclose()
    assert redis_client.hgetall(target) == {} and not redis_client.exists(lease)


@pytest.mark.parametrize("says_its_epoch", [True, False], ids=["release", "release-without-epoch"])
async def test_a_lease_that_lapsed_before_it_was_given_back_is_not_taken_back_by_a_late_renewal(
    redis_client, settings, says_its_epoch
):
    """A stop on a starved machine: the lease lapses, the consumer gives it back (nothing to
    delete), and a renewal sent before that runs after it. The release moves the epoch on all
    the same, so the renewal cannot take it back (it did: the lease held on after the worker
    ended). Without the epoch (what an earlier release sends) the hazard shows."""
    keys = Keys(settings.key_prefix)
    lease, epoch_key = keys.capture_lease(0), keys.capture_lease_epoch(0)
    redis = connect_async(settings)
    try:
        _, epoch = await LEASE_ACQUIRE.run(redis, [lease, epoch_key], ["me", 60_000, ""])
        redis_client.delete(lease)  # lapsed
        said = ["me", epoch.decode()] if says_its_epoch else ["me"]
        assert await LEASE_RELEASE.run(redis, [lease, epoch_key], said) == 0  # nothing to delete
        renewed = await CAPTURE_LEASE_RENEW.run(redis, [lease, epoch_key], ["me", epoch.decode(), 5000])
    finally:
        await redis.aclose()
    assert (renewed, redis_client.hget(lease, "id")) == ((0, None) if says_its_epoch else (1, b"me"))


async def test_entries_read_again_and_again_by_takeovers_are_not_dead_letters(redis_client, settings, fake_ov):
    """Redelivery counts say nothing of an entry: 20 takeovers (each a re-claim) then a
    consumer that lives applies it; only an error raised while applying it counts."""
    [entry] = publish(redis_client, settings, [turn(SID, 0)])
    stream = Keys(settings.key_prefix).stream(_shard(settings))
    redis_client.xgroup_create(stream, settings.consumer_group, id="0", mkstream=True)
    redis_client.xreadgroup(settings.consumer_group, "first", {stream: ">"})
    for n in range(20):  # each takeover of a slow or starved consumer claims what it held
        redis_client.xclaim(stream, settings.consumer_group, f"taker{n}", 0, [entry])
    [row] = redis_client.xpending_range(stream, settings.consumer_group, "-", "+", 10)
    assert row["times_delivered"] > settings.max_deliveries + 1
    worker = make_worker(settings, fake_ov, burst=True)
    async with asyncio.timeout(20):
        await worker.run()
    assert worker.stats.dead_lettered == 0 and list_dead_letters(redis_client, settings) == []
    assert ov_texts(fake_ov, SID) == expected_texts(SID, 1)
