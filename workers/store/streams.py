"""Publishing turn events onto the sharded Redis streams.

A session's events always go to its stream in the deployment's shard map
(core.shard_map: ``shard_of(ov_session_id(...))`` of the current generation), so one
consumer sees them in the order they were published; the publish script refuses a
stream a reshard closed, and the publisher reads the map again. The entry is
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
from redis.exceptions import AskError

from core.config import Settings
from core.defaults import LAST_TURN_TTL_S, STREAM_TRIM_INTERVAL_S
from core.events import STREAM_FIELD, TurnEvent, encode
from core.ids import ov_session_id
from core.shard_map import ShardMap
from workers.store.connection import StreamEntry, stream_entries, text
from workers.store.keys import Keys, shard_of
from workers.store.scripts import PUBLISH_TURN, TRIM_APPLIED
from workers.store.shard_map import read_shard_map, read_shard_map_async

log = logging.getLogger(__name__)

PUBLISH_MAP_RETRIES = 12
PUBLISH_MOVED_RETRIES = 3
"""A replicated publish sent to a node its slot left (MOVED) is sent again this often, each
time after the slot map is read again."""
"""Tries of a publish whose map is behind its tag (about 4 s of waiting in all)."""


def shard_of_event(settings: Settings, event: TurnEvent) -> int:
    """The shard carrying ``event``'s session in a deployment never resharded."""
    return shard_of(ov_session_id(event.session_id, event.session_key), settings.shards)


def stream_of_event(settings: Settings, event: TurnEvent) -> str:
    """The stream key ``event`` is published to in a deployment never resharded."""
    return Keys(settings.key_prefix).stream(shard_of_event(settings, event))


def publish_raw(redis_client: redis.Redis, stream: str, payload: bytes) -> str:
    """XADD an already encoded entry to ``stream``; returns the stream id."""
    stream_id = redis_client.xadd(stream, {STREAM_FIELD: payload})
    return text(stream_id)


def marks_last_turn(event: TurnEvent) -> bool:
    """Whether publishing ``event`` moves its session's ``Keys.last_turn`` (a turn with messages)."""
    return bool(event.messages) and event.commit is None


def last_turn_ttl_s(settings: Settings) -> int:
    """How long ``Keys.last_turn`` lives: a week, and never past the snapshot it is compared
    with (a marker outliving the snapshot tells nothing)."""
    return min(LAST_TURN_TTL_S, settings.snapshot_ttl_s)


def publish_call(
    settings: Settings, shard_map: ShardMap, event: TurnEvent
) -> tuple[list[str], list[str | bytes | int]]:
    """``PUBLISH_TURN``'s keys and arguments for ``event`` under ``shard_map``."""
    ov_sid = ov_session_id(event.session_id, event.session_key)
    keys = Keys(settings.key_prefix)
    tag = shard_map.tag_of(ov_sid)
    script_keys = [keys.tag_generation(tag), keys.stream(shard_map.stream_of(ov_sid))]
    if marks_last_turn(event):
        script_keys.append(keys.last_turn(tag, ov_sid))
    args: list[str | bytes | int] = [
        shard_map.generation,
        STREAM_FIELD,
        encode(event),
        event.event_id,
        last_turn_ttl_s(settings),
    ]
    return script_keys, args


class NotReplicated(RuntimeError):
    """A turn its replicas did not confirm in time (``publish_replicas``): not delivered.
    Publish it again; capture drops a second copy by its event id."""


def publish_turn(redis_client: redis.Redis, settings: Settings, event: TurnEvent) -> str:
    """Append ``event`` to its session's current stream and mark it as the session's newest
    turn (one script); returns the stream id. A map changed under us (a reshard closed the
    stream) is read again; a reshard still closing its tags is waited for, briefly. With
    ``publish_replicas``, returns only once that many replicas hold it (else NotReplicated)."""
    for attempt in range(PUBLISH_MAP_RETRIES):
        shard_map = read_shard_map(redis_client, settings)
        published, value = _publish(redis_client, settings, *publish_call(settings, shard_map, event))
        if int(published) == 1:
            log.debug("published turn %s of session %s as %s", event.event_id, event.session_id, text(value))
            return text(value)
        time.sleep(min(0.5, 0.01 * 2**attempt))
    raise RuntimeError(
        f"turn {event.event_id} not published: the shard map stayed behind its tag's generation "
        f"{text(value)} (a reshard that stopped half way? `ovstream status`; any capture worker finishes it)"
    )


def _publish(client: redis.Redis, settings: Settings, keys: list[str], args: list[str | bytes | int]) -> Any:
    wanted = settings.publish_replicas
    if wanted == 0:
        return PUBLISH_TURN(client, keys, args)
    # WAIT counts the replicas of the writes made on its own connection: one pipeline, on the
    # node holding the stream (a cluster client would send a keyless WAIT to any node).
    stream = keys[1]
    find_node = getattr(client, "get_node_from_key", None)
    for attempt in range(PUBLISH_MOVED_RETRIES + 1):
        node = client if find_node is None else client.get_redis_connection(find_node(stream))  # type: ignore[attr-defined]
        pipe = node.pipeline(transaction=False)
        PUBLISH_TURN(pipe, keys, args)
        pipe.execute_command("WAIT", wanted, settings.publish_replicas_timeout_ms)
        try:
            reply, replicas = pipe.execute()
            break
        except (AskError, redis.ConnectionError, redis.TimeoutError) as exc:
            if find_node is None:
                raise
            # MOVED (a failover or reshard moved the slot) or a node away: read the slot map
            # again, as the cluster client does for its own commands
            client.nodes_manager.initialize()  # type: ignore[attr-defined]
            if attempt == PUBLISH_MOVED_RETRIES or not isinstance(exc, AskError):
                raise
    if int(replicas) < wanted:
        raise NotReplicated(
            f"{stream}: {int(replicas)} of {wanted} replica(s) confirmed the turn within "
            f"{settings.publish_replicas_timeout_ms} ms (publishReplicas); it is not delivered, publish it again"
        )
    return reply


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


async def newest_session_entries(
    redis_client: aioredis.Redis, settings: Settings, ov_session: str, after_id: str | None, count: int
) -> list[StreamEntry]:
    """The newest ``count`` entries after ``after_id`` (None: from the start) of the streams
    carrying ``ov_session`` (its stream, and its previous one while a reshard drains it),
    oldest first. Every session's entries on those shards, not only this one's."""
    shard_map = await read_shard_map_async(redis_client, settings)
    keys = Keys(settings.key_prefix)
    low = f"({after_id}" if after_id else "-"
    entries: list[StreamEntry] = []
    for shard in shard_map.streams_of(ov_session):  # oldest first: ids continue across them
        entries += reversed(stream_entries(await redis_client.xrevrange(keys.stream(shard), "+", low, count=count)))
    return entries
