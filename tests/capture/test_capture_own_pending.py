"""An entry a consumer acked made pending again for it (a failover, or a cluster TAKEOVER, to a
node that never got the XACK: issue 54, item 8) is taken back when the consumer is idle, found
applied and acked: nothing stays pending, nothing is written twice. Real redis-server, the
FakeOV in-process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import defaults
from core.session import shard_of
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, turn
from workers.dev.fake_ov.app import FakeOV
from workers.store.keys import Keys

pytestmark = pytest.mark.redis


async def test_an_acked_entry_pending_again_for_its_consumer_is_taken_back(
    redis_client: Any, settings: Any, fake_ov: FakeOV, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(defaults, "OWN_PENDING_LOOK_S", 0.05)
    monkeypatch.setattr(defaults, "OWN_PENDING_IDLE_S", 0.2)
    worker = make_worker(settings, fake_ov, consumer="keeps-its-name")
    task = asyncio.create_task(worker.run())
    stream = Keys(settings.key_prefix).stream(shard_of("s", settings.shards))
    try:
        publish(redis_client, settings, [turn("s", 0)])
        for _ in range(500):  # applied and acked
            if ov_texts(fake_ov, "s") == expected_texts("s", 1) and pending_count(redis_client, settings) == 0:
                break
            await asyncio.sleep(0.02)
        assert pending_count(redis_client, settings) == 0
        # the failover: a node that never got the XACK delivers the entry to the same consumer
        # again (here: the group set back, the entry read under the consumer's name from outside)
        redis_client.xgroup_setid(stream, settings.consumer_group, "0")
        redis_client.xreadgroup(settings.consumer_group, "keeps-its-name", {stream: ">"}, count=10)
        assert pending_count(redis_client, settings) == 1
        for _ in range(500):
            if pending_count(redis_client, settings) == 0:
                break
            await asyncio.sleep(0.02)
        assert pending_count(redis_client, settings) == 0, (
            "the entry stayed pending for a consumer that will not read it"
        )
        assert ov_texts(fake_ov, "s") == expected_texts("s", 1)  # found applied: not written again
    finally:
        worker.stop()
        await task
