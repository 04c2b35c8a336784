"""Publishing turn events onto the sharded Redis streams.

A session's events always go to the shard ``shard_of(ov_session_id(...))``,
so one consumer sees them in the order they were published. The entry is
``{"e": encode(TurnEvent)}``; the stream is capped near ``stream_maxlen``
(approximate trimming, which Redis does cheaply in whole macro nodes).
"""

from __future__ import annotations

import logging

import redis
import redis.asyncio as aioredis

from core.config import Settings
from core.events import STREAM_FIELD, TurnEvent, encode
from core.ids import ov_session_id
from core.keys import Keys, shard_of

log = logging.getLogger(__name__)


def shard_of_event(settings: Settings, event: TurnEvent) -> int:
    """The shard carrying ``event``'s session."""
    return shard_of(ov_session_id(event.session_id, event.session_key), settings.shards)


def stream_of_event(settings: Settings, event: TurnEvent) -> str:
    """The stream key ``event`` is published to."""
    return Keys(settings.key_prefix).stream(shard_of_event(settings, event))


def _text(stream_id: bytes | str) -> str:
    return stream_id.decode() if isinstance(stream_id, bytes) else stream_id


def publish_raw(redis_client: redis.Redis, settings: Settings, stream: str, payload: bytes) -> str:
    """XADD an already encoded entry to ``stream``; returns the stream id."""
    stream_id = redis_client.xadd(
        stream, {STREAM_FIELD: payload}, maxlen=settings.stream_maxlen, approximate=True
    )
    return _text(stream_id)


def publish_turn(redis_client: redis.Redis, settings: Settings, event: TurnEvent) -> str:
    """Append ``event`` to its session's shard stream; returns the stream id."""
    stream = stream_of_event(settings, event)
    stream_id = publish_raw(redis_client, settings, stream, encode(event))
    log.debug("published turn %s of session %s to %s as %s", event.event_id, event.session_id, stream, stream_id)
    return stream_id


async def apublish_turn(redis_client: aioredis.Redis, settings: Settings, event: TurnEvent) -> str:
    """``publish_turn`` for an asyncio client."""
    stream = stream_of_event(settings, event)
    stream_id = await redis_client.xadd(
        stream, {STREAM_FIELD: encode(event)}, maxlen=settings.stream_maxlen, approximate=True
    )
    return _text(stream_id)
