"""Publishing turn events onto the sharded Redis streams.

A session's events always go to the shard ``shard_of(ov_session_id(...))``,
so one consumer sees them in the order they were published. The entry is
``{"e": encode(TurnEvent)}``. Nothing caps the stream here: a producer cannot
know what capture has applied, so a backlog (capture or OV away) stays whole;
capture trims what it applied (``AppliedTrim``). With the XADD, in the same
round trip, ``Keys.last_turn`` names the session's newest turn (the plugin's
publisher does the same).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis

from core.config import Settings
from core.defaults import LAST_TURN_TTL_S, STREAM_TRIM_INTERVAL_S
from core.events import STREAM_FIELD, TurnEvent, encode
from core.ids import ov_session_id
from workers.store.connection import text
from workers.store.keys import Keys, shard_of
from workers.store.scripts import TRIM_APPLIED

log = logging.getLogger(__name__)


def shard_of_event(settings: Settings, event: TurnEvent) -> int:
    """The shard carrying ``event``'s session."""
    return shard_of(ov_session_id(event.session_id, event.session_key), settings.shards)


def stream_of_event(settings: Settings, event: TurnEvent) -> str:
    """The stream key ``event`` is published to."""
    return Keys(settings.key_prefix).stream(shard_of_event(settings, event))


def publish_raw(redis_client: redis.Redis, stream: str, payload: bytes) -> str:
    """XADD an already encoded entry to ``stream``; returns the stream id."""
    stream_id = redis_client.xadd(stream, {STREAM_FIELD: payload})
    return text(stream_id)


def marks_last_turn(event: TurnEvent) -> bool:
    """Whether publishing ``event`` moves its session's ``Keys.last_turn`` (a turn with messages)."""
    return bool(event.messages) and event.commit is None


def _queue_publish(pipe: Any, settings: Settings, event: TurnEvent) -> None:
    """Queue the XADD of ``event`` and the mark of its session's newest turn (sync or async pipeline)."""
    ov_sid = ov_session_id(event.session_id, event.session_key)
    shard = shard_of(ov_sid, settings.shards)
    keys = Keys(settings.key_prefix)
    pipe.xadd(keys.stream(shard), {STREAM_FIELD: encode(event)})
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


class AppliedTrim:
    """Trims one turn stream of the entries every consumer group has applied (read and
    acknowledged), at most every ``STREAM_TRIM_INTERVAL_S``: the one thing that shortens a
    turn stream. ``keep_tail`` newest entries always stay (assemble's overlay scan reads them)."""

    def __init__(
        self, redis_client: aioredis.Redis, stream: str, keep_tail: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.redis = redis_client
        self.stream = stream
        self.keep_tail = keep_tail
        self._clock = clock
        self._next_at = 0.0
        self.trimmed = 0
        """Entries trimmed so far."""

    async def __call__(self) -> int:
        now = self._clock()
        if now < self._next_at:
            return 0
        self._next_at = now + STREAM_TRIM_INTERVAL_S
        gone = int(await TRIM_APPLIED.run(self.redis, [self.stream], [self.keep_tail]))
        self.trimmed += gone
        if gone:
            log.debug("trimmed %d applied entries from %s", gone, self.stream)
        return gone
