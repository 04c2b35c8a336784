"""Turns a publisher older than live resharding appends to a retired stream ("strays").

Such a publisher does not read the shard map: it appends every turn to its session tag's
first-generation stream (``{s<tag>}:turns``), whatever the map says. Once that generation is
retired nothing reads the stream, and when it is deleted the next append creates it again
without a consumer group. So capture adopts what arrives there: every entry its group never
delivered (every entry, in a stream created again) is moved to the session's stream in the
current map, oldest first, one script per entry (``ADOPT_STRAY``: XDEL, then XADD in the
tag's slot), so each entry is moved exactly once whichever capture process moves it, and a
session one process publishes keeps its order. Each adoption is logged as a warning naming
the stream: the plugin writing there should be upgraded. A retired stream is deleted only
once it holds no stray (``DELETE_DRAINED``).
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from core.config import Settings
from core.events import STREAM_FIELD, EventDecodeError, TurnEvent, decode
from core.ids import ov_session_id
from core.shard_map import ShardMap
from workers.store.connection import consumer_group, stream_entries, text
from workers.store.keys import Keys
from workers.store.scripts import ADOPT_STRAY, DELETE_DRAINED
from workers.store.streams import last_turn_ttl_s, marks_last_turn

log = logging.getLogger(__name__)

STRAY_BATCH = 100
"""Entries one stream gives up per call; the next tick takes the rest."""


async def adopt_strays(client: aioredis.Redis, settings: Settings, shard_map: ShardMap) -> int:
    """Move the strays of every generation-0 stream to their sessions' current streams, up to
    ``STRAY_BATCH`` per stream; returns how many this call moved."""
    first = shard_map.first_left_behind()
    if not first:
        return 0
    keys = Keys(settings.key_prefix)
    async with client.pipeline(transaction=False) as pipe:
        for stream in first:
            pipe.xlen(keys.stream(stream))
        lengths = await pipe.execute()
    moved = 0
    for stream, length in zip(first, lengths, strict=True):
        if length:
            moved += await _adopt(client, settings, shard_map, keys, stream.tag, keys.stream(stream))
    return moved


async def _adopt(
    client: aioredis.Redis, settings: Settings, shard_map: ShardMap, keys: Keys, tag: int, stream: str
) -> int:
    delivered = await _delivered(client, stream, settings.consumer_group)
    low = "-" if delivered is None else f"({delivered}"
    entries = stream_entries(await client.xrange(stream, low, "+", count=STRAY_BATCH))
    moved = 0
    for entry_id, fields in entries:
        payload = fields.get(STREAM_FIELD.encode(), b"")
        script_keys, event_id = _destination(shard_map, keys, tag, payload)
        args: list[bytes | str | int] = [
            entry_id,
            STREAM_FIELD,
            payload,
            shard_map.generation,
            event_id,
            last_turn_ttl_s(settings),
        ]
        done = int(await ADOPT_STRAY.run(client, [stream, *script_keys], args))
        if done < 0:
            break  # the map moved on: the next tick adopts with the new one
        moved += done
    await DELETE_DRAINED.run(client, [stream], [settings.consumer_group])  # gone once nothing is left to adopt
    if moved:
        log.warning(
            "adopted %d turn(s) a publisher older than resharding appended to %s (a stream of retired "
            "generation 0): each went to its session's stream of generation %d; upgrade that plugin",
            moved,
            stream,
            shard_map.generation,
        )
    return moved


async def _delivered(client: aioredis.Redis, stream: str, group: str) -> str | None:
    """The last id ``group`` delivered from ``stream``; None when the stream has no such group."""
    try:
        groups = await client.xinfo_groups(stream)
    except ResponseError:  # deleted meanwhile: whatever is there now is new
        return None
    found = consumer_group(groups, group)
    return None if found is None else text(found.get("last-delivered-id"))


def _destination(shard_map: ShardMap, keys: Keys, tag: int, payload: bytes) -> tuple[list[str], str]:
    """The keys after the stray's own stream (its current stream, the tag's generation key,
    its session's last-turn key when it marks one) and its event id. An entry that is no turn
    (or a turn of another tag's session) goes to the tag's first current stream, where capture
    deals with it as with any such entry."""
    try:
        event = decode(payload, TurnEvent)
        session = ov_session_id(event.session_id, event.session_key)
    except (EventDecodeError, ValueError):
        event, session = None, ""
    if event is None or shard_map.tag_of(session) != tag:  # no turn, or not this tag's (capture says so)
        home = next(s for s in shard_map.current() if s.tag == tag)
        return [keys.stream(home), keys.tag_generation(tag)], ""
    script_keys = [keys.stream(shard_map.stream_of(session)), keys.tag_generation(tag)]
    if marks_last_turn(event):
        script_keys.append(keys.last_turn(tag, session))
    return script_keys, event.event_id
