"""A shard consumer that crashes is started again with capped exponential backoff,
one log line per crash (the traceback only the first time)."""

from __future__ import annotations

import asyncio
import logging
from itertools import pairwise

from core import defaults
from tests.helpers.capture import make_worker
from workers.capture.shard import ShardConsumer


async def _ticks(worker, now: list[float], count: int, step_s: float) -> None:
    for _ in range(count):
        await worker._tick(acquire=True)
        for _ in range(3):  # let a consumer started by the tick run (and crash)
            await asyncio.sleep(0)
        now[0] += step_s


async def test_a_crashing_shard_consumer_is_retaken_with_backoff(redis_client, settings, fake_ov, monkeypatch, caplog):
    now = [1000.0]
    starts: list[float] = []

    async def crash(self: ShardConsumer) -> None:
        starts.append(now[0])
        raise RuntimeError("broken shard")

    monkeypatch.setattr(ShardConsumer, "run", crash)
    worker = make_worker(settings, fake_ov, shards=[0], clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="workers.capture.worker")
    try:
        await worker.ensure_group(0)
        await _ticks(worker, now, 400, 0.1)  # 40 s of the fake clock
    finally:
        await worker.close()
    # without backoff every tick would start it again (400 starts)
    delays = [worker.restart_delay(n) for n in range(1, 8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    expected = 1 + sum(1 for k in range(1, 8) if sum(delays[:k]) + 0.1 * k < 40)
    assert len(starts) == expected == 7
    gaps = [b - a for a, b in pairwise(starts)]
    for n, gap in enumerate(gaps, start=1):
        assert delays[n - 1] <= gap <= delays[n - 1] + 0.35, (n, gaps)
    crashed = [r for r in caplog.records if "consumer crashed" in r.getMessage()]
    assert len(crashed) == len(starts)
    assert "RuntimeError: broken shard" in crashed[-1].getMessage()
    assert crashed[0].exc_info is not None and all(r.exc_info is None for r in crashed[1:])


def test_the_restart_backoff_is_capped(settings, fake_ov):
    worker = make_worker(settings, fake_ov, shards=[0])
    assert worker.restart_delay(1) == defaults.CAPTURE_RESTART_BACKOFF_S
    assert worker.restart_delay(50) == defaults.CAPTURE_RESTART_BACKOFF_MAX_S


async def test_a_consumer_that_ran_long_before_crashing_starts_the_count_afresh(
    redis_client, settings, fake_ov, monkeypatch
):
    now = [1000.0]
    started = asyncio.Event()
    crash_now = asyncio.Event()

    async def run(self: ShardConsumer) -> None:
        started.set()
        await crash_now.wait()
        raise RuntimeError("late failure")

    monkeypatch.setattr(ShardConsumer, "run", run)
    worker = make_worker(settings, fake_ov, shards=[0], clock=lambda: now[0])
    [shard] = worker.shards
    worker.crashes[shard] = 6  # earlier crashes in a row
    try:
        await worker.ensure_group(0)
        await _ticks(worker, now, 1, 0.1)
        assert started.is_set()
        now[0] += defaults.CAPTURE_RESTART_BACKOFF_MAX_S + 1  # it ran a long time
        crash_now.set()
        await _ticks(worker, now, 2, 0.1)
    finally:
        await worker.close()
    assert worker.crashes[shard] == 1
