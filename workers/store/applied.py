"""The per-session applied offset: how capture gets exactly-once effect in OV.

Stream delivery is at-least-once, so every session keeps a Redis hash
(``Keys.applied``) saying how far its stream entries are in OV:

- ``last_id``: every entry up to this stream id is in OV (or was skipped);
- ``total``: OV's ``total_message_count`` after our last write (a cache, valid
  while no intent is recorded, so steady state needs no OV read);
- ``captured``: how many of OpenClaw's transcript messages are in OV:
  ``len(event.messages)`` of the last applied afterTurn event, or that plus the
  turn's messages for a commitTurn event (which carries only its turn);
- ``intent``: written just before an OV write: the total before it and the
  (stream id, OV message count) of each entry in it;
- ``partial_id`` / ``partial_skip``: an entry whose first messages are already
  in OV (learned from an intent), and how many;
- ``adv``: recent commitTurn advancement keys, to drop a re-sent turn;
- ``ev``: recent event ids, to drop an event the publisher re-sent as a new
  entry (it lost the XADD reply), which stream ids cannot tell apart;
- ``parked``: the stream id of an entry that was dead-lettered: nothing of the
  session applies past it until an operator's ``dlq replay`` releases the session
  (workers.capture.parking), so a replay keeps the session's order.

After a write, one MULTI sets ``last_id``/``total``, drops the intent and
XACKs. A redelivered entry at or below ``last_id`` is acked and skipped; an
intent left by a crash is settled by reading OV's ``total_message_count``
(monotonic: commits archive messages, they never lower it) and comparing it
with the recorded base, so only the messages not yet written are written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from core.defaults import CAPTURE_ADVANCEMENTS_KEPT, CAPTURE_EVENT_IDS_KEPT
from workers.store.connection import text

ADVANCEMENTS_KEPT = CAPTURE_ADVANCEMENTS_KEPT
EVENT_IDS_KEPT = CAPTURE_EVENT_IDS_KEPT

LAST_ID = "last_id"
TOTAL = "total"
CAPTURED_THROUGH = "captured"
INTENT = "intent"
PARTIAL_ID = "partial_id"
PARTIAL_SKIP = "partial_skip"
ADVANCEMENTS = "adv"
EVENT_IDS = "ev"
PARKED = "parked"


def parse_id(stream_id: str) -> tuple[int, int]:
    """A stream id ``"<ms>-<seq>"`` as a tuple that sorts like Redis does."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass(slots=True)
class Intent:
    """An OV write in progress: the total before it and its entries in order, with their
    events' ids and the session's captured count after each (``events``, ``captured``: what a
    settled write was, whether or not its entries are in the round that settles it; absent
    from intents of earlier releases, which read only the first two fields)."""

    base: int
    entries: list[tuple[str, int]]
    events: list[str] = field(default_factory=list)
    captured: list[int] = field(default_factory=list)

    def encode(self) -> str:
        data: dict[str, object] = {"base": self.base, "entries": self.entries}
        if self.events:
            data["events"], data["captured"] = self.events, self.captured
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: bytes | str) -> Intent:
        data = json.loads(raw)
        entries = [(str(i), int(n)) for i, n in data["entries"]]
        events, captured = [str(e) for e in data.get("events") or []], [int(c) for c in data.get("captured") or []]
        return cls(int(data["base"]), entries, events, captured)


@dataclass(slots=True)
class AppliedState:
    """One session's applied-offset hash, decoded."""

    last_id: str | None = None
    total: int | None = None
    captured: int = 0
    intent: Intent | None = None
    partial_id: str | None = None
    partial_skip: int = 0
    advancements: list[str] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    parked: str | None = None
    """The dead-lettered entry the session waits behind (None: not parked)."""
    settled_ids: set[str] = field(default_factory=set)
    """Entries ``settle_intent`` found fully stored (this round only, never persisted)."""
    captured_settled: set[str] = field(default_factory=set)
    """Entries ``settle_intent`` found stored whose captured count it took from their intent's
    record (``captured`` counts them already; this round only, never persisted)."""

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> AppliedState:
        h = {text(k): text(v) for k, v in raw.items()}
        intent = Intent.decode(h[INTENT]) if h.get(INTENT) else None
        return cls(
            last_id=h.get(LAST_ID),
            total=int(h[TOTAL]) if h.get(TOTAL) is not None else None,
            captured=int(h.get(CAPTURED_THROUGH) or 0),
            intent=intent,
            partial_id=h.get(PARTIAL_ID) or None,
            partial_skip=int(h.get(PARTIAL_SKIP) or 0),
            advancements=json.loads(h[ADVANCEMENTS]) if h.get(ADVANCEMENTS) else [],
            event_ids=json.loads(h[EVENT_IDS]) if h.get(EVENT_IDS) else [],
            parked=h.get(PARKED) or None,
        )

    def is_applied(self, stream_id: str) -> bool:
        return self.last_id is not None and parse_id(stream_id) <= parse_id(self.last_id)

    def advance(self, stream_id: str) -> None:
        if not self.is_applied(stream_id):
            self.last_id = stream_id

    def remember_advancement(self, key: str) -> None:
        self.advancements.append(key)
        del self.advancements[:-ADVANCEMENTS_KEPT]

    def remember_event(self, event_id: str) -> None:
        if event_id in self.event_ids:
            return
        self.event_ids.append(event_id)
        del self.event_ids[:-EVENT_IDS_KEPT]

    def settle_intent(self, ov_total: int) -> None:
        """Learn from OV's total what the recorded write stored; forget the intent.

        Entries fully stored move ``last_id``; an entry stored in part becomes
        ``partial_id`` with the count already there. ``total`` becomes OV's.
        """
        intent = self.intent
        if intent is None:
            return
        planned = sum(n for _, n in intent.entries)
        written = max(0, min(ov_total - intent.base, planned))
        done = 0
        self.partial_id, self.partial_skip = None, 0
        events = dict(zip((i for i, _ in intent.entries), intent.events))
        captured = dict(zip((i for i, _ in intent.entries), intent.captured))  # the recorded write's own
        for stream_id, count in intent.entries:
            if done + count <= written:
                if not self.is_applied(stream_id):
                    self.settled_ids.add(stream_id)
                self.advance(stream_id)
                if events.get(stream_id):  # a copy of its turn published again is one seen
                    self.remember_event(events[stream_id])
                if stream_id in captured:  # the entry may not be in this round: its record says
                    self.captured = max(self.captured, captured[stream_id])
                    self.captured_settled.add(stream_id)
                done += count
                continue
            if written > done:
                self.partial_id, self.partial_skip = stream_id, written - done
            break
        self.total = ov_total
        self.intent = None

    def settled_fields(self) -> dict[str, str]:
        """The hash fields after ``settle_intent`` (the intent field is deleted separately)."""
        out: dict[str, str] = {PARTIAL_ID: self.partial_id or "", PARTIAL_SKIP: str(self.partial_skip)}
        if self.last_id is not None:
            out[LAST_ID] = self.last_id
        if self.total is not None:
            out[TOTAL] = str(self.total)
        return out

    def applied_fields(self) -> dict[str, str]:
        """The hash fields written with the XACK after a write."""
        out: dict[str, str] = {
            TOTAL: str(self.total if self.total is not None else 0),
            CAPTURED_THROUGH: str(self.captured),
            ADVANCEMENTS: json.dumps(self.advancements, separators=(",", ":")),
            EVENT_IDS: json.dumps(self.event_ids, separators=(",", ":")),
        }
        if self.last_id is not None:
            out[LAST_ID] = self.last_id
        return out
