"""The dead-letter stream of capture and ``ovstream dlq list|replay``.

A turn entry that cannot be applied — undecodable, or failing more than
``max_deliveries`` times — is copied to ``Keys.dead_letters()`` with the reason
and acked on its shard, so the shard moves on; a session whose entry failed is
parked behind it, its later entries dead-lettered too (workers.capture.parking).
``replay`` releases a parked session (its dead letters apply in their order) or
publishes an older letter again as a new entry; ``drop`` deletes letters for good;
an undecodable entry cannot be replayed and stays. A letter nobody handled within
``deadLetterMaxAgeS`` is dropped as ``drop`` would (``expire_dead_letters``, run by the
commit workers' maintenance), and counted (``ovstream_dead_letters_expired``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass

import msgspec
import redis as redis_lib

from core.config import Settings
from core.events import STREAM_FIELD, EventDecodeError, TurnEvent, decode
from core.turns import address_of
from workers.store.applied import PARKED, parse_id
from workers.store.connection import Fields, stream_entries, text
from workers.store.keys import Keys, session_keys
from workers.store.streams import publish_turn

log = logging.getLogger(__name__)

REASON_UNDECODABLE = "undecodable"
REASON_FAILED = "failed"
REASON_PARKED = "parked"
"""A later entry of a session parked behind one that failed (workers.capture.parking)."""


def dead_letter_fields(
    *, stream: str, entry_id: str, payload: bytes | None, reason: str, error: str, deliveries: int, consumer: str
) -> Fields:
    """The fields of one dead-letter entry."""
    return {
        STREAM_FIELD: payload if payload is not None else b"",
        "stream": stream,
        "entry_id": entry_id,
        "reason": reason,
        "error": error[:2000],
        "deliveries": deliveries,
        "consumer": consumer,
        "failed_at": f"{time.time():.3f}",
    }


@dataclass(slots=True)
class DeadLetter:
    dlq_id: str
    stream: str
    entry_id: str
    reason: str
    error: str
    deliveries: int
    consumer: str
    failed_at: float
    payload: bytes

    @classmethod
    def from_entry(cls, dlq_id: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
        f = {text(k): v for k, v in fields.items()}
        return cls(
            text(dlq_id),
            text(f.get("stream")),
            text(f.get("entry_id")),
            text(f.get("reason")),
            text(f.get("error")),
            int(text(f.get("deliveries")) or 0),
            text(f.get("consumer")),
            float(text(f.get("failed_at")) or 0),
            f.get(STREAM_FIELD) or b"",
        )

    def event(self) -> TurnEvent:
        """The dead-lettered event; EventDecodeError when it is not one."""
        return decode(self.payload, TurnEvent)

    @property
    def session(self) -> str:
        """The OpenClaw session the event was of, as ``ovstream dlq list`` and the console show it."""
        try:
            return self.event().session_id
        except EventDecodeError:
            return "(undecodable)"


def list_dead_letters(redis: redis_lib.Redis, settings: Settings, *, limit: int = 100) -> list[DeadLetter]:
    """The oldest ``limit`` dead letters."""
    entries = stream_entries(redis.xrange(Keys(settings.key_prefix).dead_letters(), count=limit))
    return [DeadLetter.from_entry(i, f) for i, f in entries]


def release_marker(event: TurnEvent) -> TurnEvent:
    """The release marker of ``event``'s session (same identity, no messages)."""
    return msgspec.structs.replace(
        event,
        event_id=str(uuid.uuid4()),
        messages=[],
        pre_prompt_message_count=0,
        is_heartbeat=False,
        published_at=time.time(),
        advancement_key=None,
        commit=None,
        import_transcript=False,
        release=True,
    )


def replay_dead_letters(
    redis: redis_lib.Redis, settings: Settings, ids: list[str] | None = None
) -> list[tuple[DeadLetter, str | None, str]]:
    """Put the dead letters ``ids`` (None: all) back on their way.

    A letter of a parked session (workers.capture.parking) is *released*: one release marker
    per session, behind which capture applies all the session's dead letters in their order
    and deletes them. Any other letter (one from before parking existed) is published again
    as a new entry and removed. Returns ``(dead letter, stream id or None, note)`` per letter
    looked at. A stream entry dead-lettered twice (a crash between the copy and the ack) is
    published once.
    """
    key = Keys(settings.key_prefix).dead_letters()
    if ids is None:
        letters = list_dead_letters(redis, settings, limit=settings.dead_letter_maxlen)
    else:
        letters = [_one_letter(redis, key, dlq_id) for dlq_id in ids]
    seen: set[tuple[str, str]] = set()
    released: dict[str, str] = {}
    results: list[tuple[DeadLetter, str | None, str]] = []
    for letter in letters:
        try:
            event = letter.event()
            session = session_keys(settings, address_of(event, settings.agent_prefix))
        except (EventDecodeError, ValueError) as exc:
            results.append((letter, None, f"kept: not replayable ({exc})"))
            continue
        if redis.hexists(session.applied, PARKED):
            if session.applied not in released:
                released[session.applied] = publish_turn(redis, settings, release_marker(event))
                log.info("session %s released at %s", event.session_id, released[session.applied])
            results.append((letter, released[session.applied], NOTE_RELEASED))
            continue
        origin = (letter.stream, letter.entry_id)
        new_id = None
        if origin in seen:
            note = "dropped: duplicate of an entry replayed above"
        else:
            seen.add(origin)
            new_id = publish_turn(redis, settings, event)
            note = "replayed"
        redis.xdel(key, letter.dlq_id)
        log.info("dead letter %s %s%s", letter.dlq_id, note, f" as {new_id}" if new_id else "")
        results.append((letter, new_id, note))
    return results


NOTE_RELEASED = "released: applies with its session's other dead letters, in their order"


def not_replayed(results: list[tuple[DeadLetter, str | None, str]]) -> list[tuple[DeadLetter, str]]:
    """The letters a replay left waiting (neither published again nor released), with why."""
    return [(letter, note) for letter, new_id, note in results if not new_id and note != NOTE_RELEASED]


def replay_summary(results: list[tuple[DeadLetter, str | None, str]], *, notes: bool = True) -> str:
    """What a replay did, in one line: how many were published again, how many released with
    their session, and how many were not (with ``notes``, each one's: kept, or why not)."""
    released = sum(1 for _, _, note in results if note == NOTE_RELEASED)
    replayed = sum(1 for _, new_id, note in results if new_id and note != NOTE_RELEASED)
    kept = [f"{letter.dlq_id}: {note}" for letter, note in not_replayed(results)]
    said = f"{replayed} replayed, {released} released, {len(kept)} not"
    return said + (f" ({'; '.join(kept)})" if kept and notes else "")


def drop_dead_letters(redis: redis_lib.Redis, settings: Settings, ids: list[str]) -> list[tuple[DeadLetter, str]]:
    """Delete the dead letters ``ids`` for good (a turn an operator gives up on). A parked
    session left with none is released (nothing of it waits any more)."""
    key = Keys(settings.key_prefix).dead_letters()
    results: list[tuple[DeadLetter, str]] = []
    for dlq_id in ids:
        letter = _one_letter(redis, key, dlq_id)
        note = "dropped"
        try:
            event = letter.event()
            session = session_keys(settings, address_of(event, settings.agent_prefix))
        except (EventDecodeError, ValueError):
            session = None
        redis.xdel(key, letter.dlq_id)
        if session is not None:
            redis.hdel(session.parked, letter.entry_id)
            if redis.hexists(session.applied, PARKED) and not redis.hlen(session.parked):
                at = publish_turn(redis, settings, release_marker(event))
                note = f"dropped; session {event.session_id} has no dead letters left: released at {at}"
        log.info("dead letter %s %s", letter.dlq_id, note)
        results.append((letter, note))
    return results


_STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")


def find_dead_letter(redis: redis_lib.Redis, settings: Settings, dlq_id: str) -> DeadLetter | None:
    """The dead letter ``dlq_id``, None when there is none (or the id is no stream id)."""
    try:
        return _one_letter(redis, Keys(settings.key_prefix).dead_letters(), dlq_id)
    except KeyError:
        return None


def _one_letter(redis: redis_lib.Redis, key: str, dlq_id: str) -> DeadLetter:
    """The dead letter ``dlq_id``; KeyError when there is none (an id not shaped as a stream
    id, ``<ms>-<seq>``, included: Redis would refuse it as "Invalid stream ID")."""
    if not _STREAM_ID.fullmatch(dlq_id):
        raise KeyError(dlq_id)
    found = stream_entries(redis.xrange(key, min=dlq_id, max=dlq_id))
    if not found:
        raise KeyError(dlq_id)
    return DeadLetter.from_entry(*found[0])


EXPIRY_INTERVAL_S = 60
"""How often one process of the deployment drops the dead letters past their age."""
EXPIRY_BATCH = 500
"""Most dead letters one expiry drops (the rest the next time)."""


@dataclass(frozen=True, slots=True)
class DeadLetterSummary:
    """How many dead letters wait, since when, and how many expired unhandled."""

    count: int
    oldest_ms: int | None
    expired: int


def dead_letter_summary(redis: redis_lib.Redis, settings: Settings) -> DeadLetterSummary:
    keys = Keys(settings.key_prefix)
    with redis.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.dead_letters())
        pipe.xrange(keys.dead_letters(), count=1)
        pipe.get(keys.dead_letters_expired())
        count, first, expired = pipe.execute()
    oldest = parse_id(text(first[0][0]))[0] if first else None
    return DeadLetterSummary(int(count), oldest, int(expired or 0))


def expire_dead_letters(redis: redis_lib.Redis, settings: Settings, claimant: str, *, now: float | None = None) -> int:
    """Drop the dead letters older than ``deadLetterMaxAgeS`` (0: never), as ``dlq drop`` does (a
    parked session left with none is released), at most once per ``EXPIRY_INTERVAL_S`` over the
    deployment (``claimant`` takes the turn). Returns how many went."""
    max_age_s = settings.dead_letter_max_age_s
    keys = Keys(settings.key_prefix)
    if max_age_s <= 0 or not redis.set(keys.dead_letter_expiry(), claimant, nx=True, ex=EXPIRY_INTERVAL_S):
        return 0
    cutoff_ms = int(((now or time.time()) - max_age_s) * 1000)
    old = [
        text(dlq_id)
        for dlq_id, _ in stream_entries(redis.xrange(keys.dead_letters(), max=cutoff_ms, count=EXPIRY_BATCH))
    ]
    if not old:
        return 0
    log.warning("%d dead letter(s) older than %d s were never handled: dropping them", len(old), max_age_s)
    drop_dead_letters(redis, settings, old)
    redis.incrby(keys.dead_letters_expired(), len(old))
    return len(old)
