"""Capture's fenced read is idempotent under a client's blind retry (issue 54): a read whose
reply is lost after Redis delivered a batch, run again by a client that retries on a
connection error (redis-py's cluster client does, ``ERRORS_ALLOW_RETRY``), hands over the same
batch, so nothing stays pending for a consumer that never saw it.

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

from core.config import Settings
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from tests.helpers.reply_dropper import ReplyDropper
from workers.dev.fake_ov.app import FakeOV
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
