"""The IO of assemble's two per-turn questions (the rules are core.turns'):

- which turns the session's snapshot does not hold yet: the newest entries of
  the session's stream shard after the snapshot's stream id (turns other
  processes published) plus the turns the plugin sends with the call (those
  it still holds while Redis is away, and those it published recently);
- the recall block of the current user turn: searched once per turn and kept
  in Redis, so every model request of the host's tool loop carries the same
  block, whichever RPC process answers it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

from core.events import STREAM_FIELD, EventDecodeError, TurnEvent, decode
from core.turns import PendingTurn, address_of, last_event_id, recall_turn_key, uncaptured_turns
from workers.rpc.context import Caller, Services
from workers.rpc.models import AssembleRequest
from workers.store.connection import REDIS_ERRORS
from workers.store.recall_blocks import read_block, settle_block
from workers.store.snapshots import ZERO_ID
from workers.store.streams import newest_session_entries

log = logging.getLogger(__name__)


def _json_str(value: str) -> bytes:
    return json.dumps(value).encode()


async def scan_session_events(svc: Services, caller: Caller, after_id: str) -> list[TurnEvent]:
    """This session's events among the newest ``overlay_stream_scan`` entries of its
    stream after ``after_id`` (and of its previous stream while a reshard drains it),
    oldest first. Redis errors propagate."""
    count = svc.settings.overlay_stream_scan
    if count <= 0:
        return []
    after = after_id if after_id and after_id != ZERO_ID else None
    entries = await newest_session_entries(svc.redis, svc.settings, caller.require_session(), after, count)
    # A cheap byte test first: most entries of a busy shard are other sessions'.
    needles = [_json_str(v) for v in (caller.session_id, caller.session_key) if v]
    caller_address = caller.address()
    events: list[TurnEvent] = []
    for _, fields in entries:
        data = fields.get(STREAM_FIELD.encode())  # the clients here speak bytes (workers.store.connection)
        if data is None or not any(n in data for n in needles):
            continue
        try:
            event = decode(data, TurnEvent)
            address = address_of(event, svc.settings.agent_prefix)
        except (EventDecodeError, ValueError):
            continue  # capture dead-letters it; it is no turn of anyone's
        if address == caller_address:
            events.append(event)
    return events


async def pending_turns(
    svc: Services,
    caller: Caller,
    req: AssembleRequest,
    *,
    after_id: str,
    reflected_event_ids: list[str],
    reflected_advancements: list[str],
    session_known: bool,
    last_turn: str | None,
    redis_away: bool = False,
) -> list[PendingTurn]:
    """The turns to append to the snapshot, each once (core.turns.uncaptured_turns).

    ``last_turn``, the session's newest published turn, decides whether the
    stream is read: only when that turn is neither in the snapshot nor among
    the plugin's (another process published it). ``redis_away``: only the
    turns the plugin still holds count; the ones it published are in Redis,
    where capture will find them.
    """
    events: list[TurnEvent] = [*(req.heldTurns or [])]
    if not redis_away:
        events += req.recentTurns or []
        known = {*reflected_event_ids, *(e.event_id for e in events)}
        if last_turn is not None and last_turn not in known:
            try:
                events += await scan_session_events(svc, caller, after_id)
            except REDIS_ERRORS as exc:
                log.warning(
                    "assemble: stream of session=%s unreadable, using the plugin's turns only: %s",
                    caller.ov_session_id,
                    exc,
                )
    return uncaptured_turns(
        svc.settings,
        events,
        reflected_event_ids=reflected_event_ids,
        reflected_advancements=reflected_advancements,
        session_known=session_known,
    )


def recall_key(
    svc: Services,
    caller: Caller,
    req: AssembleRequest,
    prompt: str,
    reflected_event_ids: list[str],
    pending: list[PendingTurn],
) -> str:
    """The Redis key of the current user turn's recall block (core.turns.recall_turn_key)."""
    session_keys = svc.session_keys(caller)
    turn = recall_turn_key(
        caller.require_session(),
        session_keys.scope,
        prompt,
        last_event_id(reflected_event_ids, pending),
        req.transcript_length(),
    )
    return session_keys.recall_turn(turn)


def _remember_block(svc: Services, key: str, block: str) -> str:
    with contextlib.suppress(ValueError):  # larger than the whole cache: used, not kept
        svc.recalls[key] = (time.monotonic() + svc.settings.recall_turn_ttl_s, block)
    return block


def remembered_block(svc: Services, key: str) -> str | None:
    """The turn's block as this process kept it ("" for none), or None when it keeps none.

    A block settled in Redis never changes for its turn, so this process keeps
    the ones it has seen: the later requests of a turn cost no Redis call.
    """
    kept = svc.recalls.get(key)
    return kept[1] if kept is not None and kept[0] > time.monotonic() else None


async def redis_block(svc: Services, key: str) -> str | None:
    """The turn's block as settled in Redis ("" when it has none), kept in this process from
    then on; None when no search ran yet (or Redis is away). For a turn ``remembered_block`` lacks."""
    try:
        block = await read_block(svc.redis, key)
    except REDIS_ERRORS:
        return None
    return None if block is None else _remember_block(svc, key, block)


async def settle_turn_block(svc: Services, key: str, block: str | None) -> str | None:
    """Settle the turn's block: the first search of the turn to finish wins (SET NX),
    so every process and every request of the turn carries the same block. Returns it."""
    try:
        winner = await settle_block(svc.redis, key, block or "", svc.settings.recall_turn_ttl_s)
        return block if winner is None else (_remember_block(svc, key, winner) or None)
    except REDIS_ERRORS as exc:
        log.info("assemble: recall block not kept (Redis: %s); the next request of the turn searches again", exc)
        return block
