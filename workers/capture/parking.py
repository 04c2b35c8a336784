"""A session parked behind a dead letter, and its release by ``ovstream dlq replay``.

OV appends a session's messages; nothing can go in before what is there. So a session never
applies past an entry it could not apply: when an entry is dead-lettered for failing (an
undecodable one names no session), its session is *parked* (``parked`` in its applied hash,
set in the fenced write that acks the entry), and every later entry of the session is
dead-lettered behind it, reason ``parked``. The session's hash ``Keys.parked`` maps each of
its dead-lettered stream ids to its dead-letter id, so the dead letters hold the session's
tail in its order.

``dlq replay`` publishes a *release marker* on the session's stream. The consumer that
reaches it applies the session's dead letters first (as entries with the stream ids they
had, so the applied offset and every dedupe rule treat them as the turns they were), then
the marker, which clears the mark; then what came after. Each applied letter leaves the
hash in the fenced write that applies it and the dead-letter stream right after. A letter
that fails past ``maxDeliveries`` again ends the release: the marker is acked, the session
stays parked and its letters stay (``dlq drop`` removes a turn an operator gives up on).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from core.config import Settings
from workers.capture.failures import EntryFailures
from workers.capture.fence import HashWrite
from workers.capture.plan import Entry, SessionRef
from workers.store.applied import parse_id
from workers.store.connection import stream_entries, text
from workers.store.dead_letters import REASON_PARKED, DeadLetter
from workers.store.keys import Keys

log = logging.getLogger(__name__)

DeadLetterFn = Callable[[list[tuple[Entry, str, str]]], Awaitable[None]]


def release_at(entries: list[Entry]) -> int | None:
    """Index of the first release marker among a session's entries (None: none)."""
    for i, entry in enumerate(entries):
        if entry.event is not None and entry.event.release:
            return i
    return None


async def entries_of_parked(
    redis: aioredis.Redis,
    settings: Settings,
    failures: EntryFailures,
    dead_letter: DeadLetterFn,
    session: SessionRef,
    entries: list[Entry],
    parked: str,
) -> list[Entry]:
    """What a parked session's round applies: nothing before its release marker (those entries
    are dead-lettered behind ``parked``); from the marker on, its dead letters then the entries."""
    at = release_at(entries)
    behind = entries if at is None else entries[:at]
    if behind:
        await dead_letter([(e, REASON_PARKED, f"session parked behind entry {parked}") for e in behind])
        log.warning(
            "session %s: %d entries dead-lettered behind parked entry %s (`ovstream dlq replay` releases it)",
            session.ov_session_id,
            len(behind),
            parked,
        )
    if at is None:
        return []
    letters = await parked_letters(redis, settings, session)
    await failures.load(letters)
    log.info("session %s: releasing %d dead letters in order", session.ov_session_id, len(letters))
    return letters + entries[at:]


async def parked_letters(redis: aioredis.Redis, settings: Settings, session: SessionRef) -> list[Entry]:
    """The session's dead letters as entries with the stream ids they had, in that order."""
    index = {text(k): text(v) for k, v in (await redis.hgetall(session.parked_key)).items()}
    dlq = Keys(settings.key_prefix).dead_letters()
    ordered = sorted(index.items(), key=lambda kv: parse_id(kv[0]))
    async with redis.pipeline(transaction=False) as pipe:
        for _, dlq_id in ordered:
            pipe.xrange(dlq, min=dlq_id, max=dlq_id)
        found = await pipe.execute()
    letters: list[Entry] = []
    for (entry_id, dlq_id), rows in zip(ordered, found):
        entries = stream_entries(rows)
        if not entries:  # dropped by an operator (``dlq drop``) since
            continue
        letter = DeadLetter.from_entry(*entries[0])
        entry = Entry(entry_id, letter.payload, letter=dlq_id, session=session)
        entry.event = letter.event()
        letters.append(entry)
    return letters


def applied_letters(session: SessionRef, entries: list[Entry]) -> list[HashWrite]:
    """The fenced write taking applied dead letters out of the session's parked index."""
    ids = tuple(e.id for e in entries if e.letter is not None)
    return [HashWrite(session.parked_key, {}, ids)] if ids else []


async def delete_letters(redis: aioredis.Redis, settings: Settings, entries: list[Entry]) -> None:
    """Delete applied dead letters from the dead-letter stream (after the fenced write: a crash
    in between leaves a letter an operator's replay finds already applied by its event id)."""
    ids = [e.letter for e in entries if e.letter is not None]
    if ids:
        await redis.xdel(Keys(settings.key_prefix).dead_letters(), *ids)
