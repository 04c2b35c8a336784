"""An acknowledgement a failover lost: the entry stays pending for the consumer that applied it.

Redis replicates XACK asynchronously like any write: a replica promoted before it had one, or an
old master taking its slots back (CLUSTER FAILOVER TAKEOVER), holds the entry as pending for a
live consumer that holds nothing. Seen in tests/cluster/test_cluster_failover.py under load: a
lag that never drained. Simulated on one real Redis, atomically while capture runs: the group's
position set back before the newest entry and that entry read again as capture's own consumer.
Capture finds it when idle (defaults.CAPTURE_OWN_PENDING_CHECK_S), applies it once (OV has it:
skipped) and acknowledges it.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from core import defaults
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from workers.store.keys import Keys, shard_of

SESSION = "lost-ack"


async def test_an_entry_pending_for_capture_though_it_holds_none_is_acknowledged_once(
    redis_client, settings, fake_ov, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(defaults, "CAPTURE_OWN_PENDING_CHECK_S", 0.2)
    stream = Keys(settings.key_prefix).stream(shard_of(SESSION, settings.shards))
    worker = make_worker(settings, fake_ov)
    first, _second = publish(redis_client, settings, [turn(SESSION, 0), turn(SESSION, 1)])
    lost = asyncio.Event()

    def settled() -> bool:
        return ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 2) and pending_count(redis_client, settings) == 0

    async def lose_an_ack() -> None:
        while not settled():
            await asyncio.sleep(0.02)
        with redis_client.pipeline(transaction=True) as pipe:  # as the promoted node holds it
            pipe.xgroup_setid(stream, settings.consumer_group, first)
            pipe.xreadgroup(settings.consumer_group, worker.consumer, {stream: ">"}, count=1)
            _, reread = pipe.execute()
        assert reread and len(reread[0][1]) == 1, reread
        assert pending_count(redis_client, settings) == 1
        lost.set()

    caplog.set_level(logging.INFO, logger="workers.capture.shard")
    losing = asyncio.create_task(lose_an_ack())
    results = await run_until([worker], lambda: lost.is_set() and settled(), timeout_s=30)
    await losing
    assert results == [None]
    assert ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 2)  # applied once, not again
    assert any("an acknowledgement lost in a failover" in r.getMessage() for r in caplog.records), caplog.text
