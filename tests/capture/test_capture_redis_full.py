"""Redis full (``maxmemory`` reached, ``noeviction``): capture waits it out and catches up.

Every write Redis refuses with OOM is Redis being unavailable for now (``REDIS_AWAY``), not a
crash: the worker stays up, says so once, and applies every turn once and in order after.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tests.helpers.capture import expected_texts, make_worker, ov_texts, publish, turn

SESSIONS = [f"full{i}" for i in range(4)]


async def _until(done: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what}: not reached"
        await asyncio.sleep(0.05)


async def test_capture_waits_out_a_full_redis_and_catches_up(redis_client, settings, fake_ov, caplog) -> None:
    publish(redis_client, settings, [turn(s, t) for t in range(3) for s in SESSIONS])
    policy = redis_client.config_get("maxmemory-policy")["maxmemory-policy"]
    worker = make_worker(settings, fake_ov)
    caplog.set_level(logging.INFO, logger="workers.capture")
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)  # full: every write refused with OOM
    try:
        task = asyncio.create_task(worker.run())
        await _until(lambda: "Redis unavailable" in caplog.text, "capture meeting the full Redis")
        await asyncio.sleep(2 * worker.lease_ms / 1000)  # full for longer than a lease
        assert not task.done(), task
    finally:
        redis_client.config_set("maxmemory", 0)
        redis_client.config_set("maxmemory-policy", policy)
    await _until(lambda: all(len(ov_texts(fake_ov, s)) == 6 for s in SESSIONS), "every turn in OV")
    worker.stop()
    async with asyncio.timeout(20):
        await task
    for session in SESSIONS:
        assert ov_texts(fake_ov, session) == expected_texts(session, 3)  # once each, in order
    assert caplog.text.count("Redis unavailable") == 1  # one line for the whole outage
    assert "Redis answers again" in caplog.text
