"""Capture's fenced read is idempotent under a client's blind retry (issue 54): a read whose
reply is lost after Redis delivered a batch, run again by a client that retries on a
connection error (redis-py's cluster client does, ``ERRORS_ALLOW_RETRY``), hands over the same
batch, so nothing stays pending for a consumer that never saw it; and an idle consumer reads
again what is pending for it though it holds nothing (an acknowledgement lost in a failover).

A real redis-server behind a proxy that drops one reply (tests/helpers/reply_dropper.py), the
FakeOV in-process.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from core import defaults
from core.config import Settings
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from tests.helpers.reply_dropper import ReplyDropper
from workers.dev.fake_ov.app import FakeOV
from workers.store.keys import Keys
from workers.store.scripts import FENCED_READ

pytestmark = pytest.mark.redis

ENTRIES_REPLY = b"*2\r\n:1\r\n"
"""FENCED_READ's answer that carries entries ({1, entries})."""


async def test_a_read_whose_reply_was_lost_is_handed_over_again(
    redis_client: Any, settings: Settings, fake_ov: FakeOV
) -> None:
    port = urlparse(settings.redis_url).port
    assert port is not None
    proxy = await ReplyDropper(port, FENCED_READ._async.sha.encode(), ENTRIES_REPLY).start()
    # A store client that retries a command after a connection error, as the cluster client does.
    store = aioredis.Redis.from_url(
        proxy.url, retry=Retry(NoBackoff(), 3), retry_on_error=[RedisConnectionError], socket_timeout=5
    )
    single = settings.model_copy(update={"shards": 1})
    worker = make_worker(single, fake_ov, redis=store)
    publish(redis_client, single, [turn("lost", i) for i in range(5)])
    try:
        results = await run_until([worker], lambda: ov_texts(fake_ov, "lost") == expected_texts("lost", 5))
        assert proxy.dropped == 1, "the proxy dropped no read's reply: the test tested nothing"
        publish(redis_client, single, [turn("lost", i) for i in range(5, 8)])
        worker = make_worker(single, fake_ov, redis=store)
        results += await run_until(
            [worker],
            lambda: ov_texts(fake_ov, "lost") == expected_texts("lost", 8) and pending_count(redis_client, single) == 0,
        )
    finally:
        await store.aclose()
        await proxy.stop()
    assert results == [None, None]
    assert ov_texts(fake_ov, "lost") == expected_texts("lost", 8)  # once each, in order


async def test_an_idle_consumer_reads_again_what_is_pending_for_it(
    redis_client: Any, settings: Settings, fake_ov: FakeOV, monkeypatch: Any
) -> None:
    # An XACK a failover lost: an entry applied, yet pending for the consumer holding the shard.
    monkeypatch.setattr(defaults, "OWN_PENDING_RECHECK_S", 0.2)
    single = settings.model_copy(update={"shards": 1})
    worker = make_worker(single, fake_ov, consumer="idle-one")
    publish(redis_client, single, [turn("acked", i) for i in range(3)])
    stream = Keys(single.key_prefix).stream(0)

    def unack_the_last() -> bool:  # once applied, put its entry back as pending for the consumer
        if ov_texts(fake_ov, "acked") != expected_texts("acked", 3):
            return False
        if pending_count(redis_client, single) == 0 and not unacked:
            last = redis_client.xrevrange(stream, count=1)[0][0]
            redis_client.execute_command("XCLAIM", stream, single.consumer_group, "idle-one", 0, last, "FORCE")
            unacked.append(last)
        return bool(unacked) and pending_count(redis_client, single) == 0

    unacked: list[bytes] = []
    assert await run_until([worker], unack_the_last) == [None]
    assert ov_texts(fake_ov, "acked") == expected_texts("acked", 3)  # read again, applied once
    assert worker.stats.skipped == 1, worker.stats  # the entry read again: already applied, acked
