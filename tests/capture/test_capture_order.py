"""Per-session order and shard spreading with several workers on several shards."""

from __future__ import annotations

import asyncio
import random

from tests.helpers.capture import (
    STEADY_LEASE_MS,
    expected_texts,
    make_worker,
    ov_texts,
    pending_count,
    publish,
    run_until,
    turn,
)
from tests.helpers.waiting import eventually
from workers.store.keys import Keys


async def test_four_workers_four_shards_keep_each_sessions_order(redis_client, settings, fake_ov):
    sessions = [f"sess-{i}" for i in range(24)]
    turns = 15
    # no takeover here: a starved test process must not lose leases between renewals
    workers = [make_worker(settings, fake_ov, consumer=f"w{i}", lease_ms=STEADY_LEASE_MS) for i in range(4)]
    held: dict[str, set[int]] = {w.consumer: set() for w in workers}

    waiting = 5  # each session's first turns wait before the workers start: read together, merged
    for i in range(waiting):
        publish(redis_client, settings, [turn(s, i) for s in sessions])

    async def publisher() -> None:
        # interleave sessions randomly, as many OpenClaw sessions do, while the workers run
        order = [(s, i) for s in sessions for i in range(waiting, turns)]
        rng = random.Random(7)
        rng.shuffle(order)
        next_turn = dict.fromkeys(sessions, waiting)
        for s, _ in order:
            publish(redis_client, settings, [turn(s, next_turn[s])])
            next_turn[s] += 1
            if next_turn[s] % 5 == 0:
                await asyncio.sleep(0.005)

    def all_written() -> bool:
        for w in workers:
            held[w.consumer] |= {s.number for s in w.consumers}
        return all(len(ov_texts(fake_ov, s)) >= 2 * turns for s in sessions)

    pub = asyncio.create_task(publisher())
    ended = await run_until(workers, all_written, timeout_s=60)
    await pub
    assert ended == [None] * 4
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, turns), s
    assert pending_count(redis_client, settings) == 0
    # merged writes: fewer OV batch calls than turns (the waiting turns make it so on a busy machine
    # too, where the workers keep up with the publisher and each round may find one turn a session)
    batch_calls = [c for c in fake_ov.calls if c[1].endswith("/messages/batch")]
    assert len(batch_calls) < len(sessions) * turns
    # each entry written once: by its owner, or by one that lost the shard before acking it (then
    # found written and acked by the next: settled), never by both
    counted = sum(w.stats.applied + w.stats.settled for w in workers)
    assert counted == len(sessions) * turns, [(w.consumer, w.stats) for w in workers]


async def test_workers_spread_over_the_shards(redis_client, settings, fake_ov):
    workers = [make_worker(settings, fake_ov, consumer=f"w{i}") for i in range(4)]

    def spread() -> bool:
        owners = [redis_client.hget(Keys(settings.key_prefix).capture_lease(s), "id") for s in range(4)]
        return all(len(w.consumers) == 1 for w in workers) and len(set(owners)) == 4

    await run_until(workers, spread, timeout_s=30)


async def test_a_dead_workers_shards_are_taken_over(redis_client, settings, fake_ov):
    from workers.capture.worker import WorkerKilled

    def kill(step: str) -> None:
        raise WorkerKilled(step)

    victim = make_worker(settings, fake_ov, consumer="victim", fault_hook=kill)
    publish(redis_client, settings, [turn(f"s{i}", 0) for i in range(8)])
    [ended] = await run_until([victim], lambda: False, timeout_s=10)
    assert isinstance(ended, WorkerKilled)
    heir = make_worker(settings, fake_ov, consumer="heir")
    await run_until([heir], lambda: all(len(ov_texts(fake_ov, f"s{i}")) == 2 for i in range(8)), timeout_s=30)
    for i in range(8):
        assert ov_texts(fake_ov, f"s{i}") == expected_texts(f"s{i}", 1)


async def test_order_holds_while_shards_move_between_joining_workers(redis_client, settings, fake_ov):
    """Workers join one by one while turns flow, so shards are handed over mid-stream."""
    sessions = [f"j{i}" for i in range(12)]
    turns = 20
    workers = [make_worker(settings, fake_ov, consumer=f"w{i}") for i in range(4)]
    tasks = []

    async def wait_for(condition) -> None:
        await eventually(condition, "workers share the shards")

    for t in range(turns):
        publish(redis_client, settings, [turn(s, t) for s in sessions])
        if t % 5 == 0:
            joining = workers[len(tasks)]
            tasks.append(asyncio.create_task(joining.run()))
            await wait_for(lambda: joining.consumers)  # it got a shard, some from a busy owner
    await wait_for(lambda: all(len(ov_texts(fake_ov, s)) >= 2 * turns for s in sessions))
    for w in workers:
        w.stop()
    assert await asyncio.gather(*tasks) == [None] * 4
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, turns), s
    # the first worker started with every shard and handed three back
    assert workers[0].stats.applied < len(sessions) * turns
    # each entry written once: by its owner, or by one that lost the shard before acking it (then
    # found written and acked by the next: settled), never by both
    assert sum(w.stats.applied + w.stats.settled for w in workers) == len(sessions) * turns


async def test_a_stop_that_arrives_while_a_shard_is_being_taken_still_stops_the_worker(
    redis_client, settings, fake_ov, monkeypatch
):
    """stop() lands while the worker's tick awaits a lease it then wins: the consumer it starts
    must stop too (it once ran on, and the worker with it: a hang in CI, a SIGTERM ignored)."""
    from workers.capture import leases as leases_module

    worker = make_worker(settings, fake_ov, consumer="late")
    acquire = leases_module.LEASE_ACQUIRE

    class StopMidAcquire:
        async def run(self, *args, **kwargs):
            taken = await acquire.run(*args, **kwargs)
            worker.stop()  # as a SIGTERM or a test's stop() arriving during the await
            return taken

    monkeypatch.setattr(leases_module, "LEASE_ACQUIRE", StopMidAcquire())
    async with asyncio.timeout(10):
        await worker.run()
    assert not worker.consumers
    owners = [redis_client.hget(Keys(settings.key_prefix).capture_lease(s), "id") for s in range(settings.shards)]
    assert owners == [None] * settings.shards  # every lease it took was given back
