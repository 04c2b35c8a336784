"""Publishing turn events onto the sharded Redis streams.

A session's events always go to the shard ``shard_of(ov_session_id(...))``,
so one consumer sees them in the order they were published. The entry is
``{"e": encode(TurnEvent)}``; the stream is capped near ``stream_maxlen``
(approximate trimming, which Redis does cheaply in whole macro nodes). With
the XADD, in the same round trip, ``Keys.last_turn`` names the session's
newest turn (the plugin's publisher does the same).
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from core.config import Settings
from core.defaults import LAST_TURN_TTL_S
from core.events import STREAM_FIELD, TurnEvent, encode
from core.ids import ov_session_id
from workers.store.connection import text
from workers.store.keys import Keys, shard_of

log = logging.getLogger(__name__)


def shard_of_event(settings: Settings, event: TurnEvent) -> int:
    """The shard carrying ``event``'s session."""
    return shard_of(ov_session_id(event.session_id, event.session_key), settings.shards)


def stream_of_event(settings: Settings, event: TurnEvent) -> str:
    """The stream key ``event`` is published to."""
    return Keys(settings.key_prefix).stream(shard_of_event(settings, event))


def publish_raw(redis_client: redis.Redis, settings: Settings, stream: str, payload: bytes) -> str:
    """XADD an already encoded entry to ``stream``; returns the stream id."""
    stream_id = redis_client.xadd(stream, {STREAM_FIELD: payload}, maxlen=settings.stream_maxlen, approximate=True)
    return text(stream_id)


def marks_last_turn(event: TurnEvent) -> bool:
    """Whether publishing ``event`` moves its session's ``Keys.last_turn`` (a turn with messages)."""
    return bool(event.messages) and event.commit is None


def _queue_publish(pipe: Any, settings: Settings, event: TurnEvent) -> None:
    """Queue the XADD of ``event`` and the mark of its session's newest turn (sync or async pipeline)."""
    ov_sid = ov_session_id(event.session_id, event.session_key)
    shard = shard_of(ov_sid, settings.shards)
    keys = Keys(settings.key_prefix)
    pipe.xadd(keys.stream(shard), {STREAM_FIELD: encode(event)}, maxlen=settings.stream_maxlen, approximate=True)
    if marks_last_turn(event):
        pipe.set(keys.last_turn(shard, ov_sid), event.event_id, ex=LAST_TURN_TTL_S)


def publish_turn(redis_client: redis.Redis, settings: Settings, event: TurnEvent) -> str:
    """Append ``event`` to its session's shard stream and mark it as the session's
    newest turn (one round trip); returns the stream id."""
    pipe = redis_client.pipeline(transaction=False)
    _queue_publish(pipe, settings, event)
    stream_id = text(pipe.execute()[0])
    log.debug("published turn %s of session %s as %s", event.event_id, event.session_id, stream_id)
    return stream_id
