"""What one capture round does for one session (pure): entries in, OV messages out.

The seed's afterTurn rules, in order, per entry: already applied (at or below
the session's ``last_id``) -> skip; an event id seen before (the publisher
re-sent it as a new entry after losing the XADD reply) -> skip; a commit
marker -> nothing to write (``commit_markers`` names it for a commit once the
round is in OV); core.turns.skip_reason (autoCapture off, heartbeat, bypassed
session, an advancement key seen before, an import into a known session) ->
skip; else the new messages
(``core.messages.convert.turn_to_ov_messages`` slices from prePromptMessageCount and
strips recall blocks), minus any already in OV from an interrupted write.
A skipped entry is still acked and moves ``last_id``; a duplicate (event id or
advancement key seen) leaves ``captured`` alone, so a replayed older event
never moves it backwards.

Consecutive entries of a session are merged into one OV batch write. In
*isolate* mode (after a merged write failed) a round carries at most one
entry with messages, so a failure points at the entry that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from core.config import Settings
from core.events import CommitReason, TurnEvent
from core.messages.convert import turn_to_ov_messages
from core.ov.layout import ov_message_count
from core.ov.messages import OVMessage, TextPart
from core.redaction import Placeholders, redact_messages, withheld_notice
from core.session import SessionAddress
from core.turns import SKIP_ADVANCEMENT_SEEN, address_of, captured_after, skip_reason, turn_start
from workers.store.applied import AppliedState, Intent, parse_id
from workers.store.keys import session_keys


class LeaseLost(Exception):
    """The shard's lease went to another consumer: stop touching the shard."""


@dataclass(frozen=True, slots=True)
class SessionRef:
    """One session as capture keys it: OV session id, agent, tenant."""

    ov_session_id: str
    agent_id: str
    tenant: str | None
    scope: str
    shard: int
    applied_key: str
    parked_key: str

    @property
    def address(self) -> SessionAddress:
        return SessionAddress(self.ov_session_id, self.agent_id, self.tenant)


def session_of(settings: Settings, event: TurnEvent) -> SessionRef:
    """The session an event belongs to; ValueError when the event names none."""
    address = address_of(event, settings.agent_prefix)
    keys = session_keys(settings, address)
    return SessionRef(
        address.ov_session_id, address.agent_id, address.tenant, keys.scope, keys.shard, keys.applied, keys.parked
    )


@dataclass(slots=True)
class Entry:
    """One stream entry this consumer holds (delivered, not yet acked)."""

    id: str
    payload: bytes | None
    failures: int = 0
    """Times applying it raised an error (``Keys.capture_failures``): dead-lettered past
    ``maxDeliveries``. Being read again after a lost lease, a restart or a takeover is not one."""
    event: TurnEvent | None = None
    session: SessionRef | None = None
    bad: str | None = None
    """Why the entry is not a usable event (then it is dead-lettered at once)."""
    retry_at: float = 0.0
    """Loop time before which a failed entry is not tried again."""
    letter: str | None = None
    """Its dead-letter id when it is a parked session's dead letter being released (its ``id``
    is the stream id it had; it is not on this consumer's stream: never acked here)."""

    @property
    def order(self) -> tuple[int, int]:
        return parse_id(self.id)


@dataclass(slots=True)
class Unit:
    """An entry in a round: the messages it writes (none for a skipped one)."""

    entry: Entry
    messages: list[OVMessage]
    skip: str | None = None
    captured: int = 0
    """The session's captured count once this entry is applied (its intent records it)."""

    @property
    def ov_count(self) -> int:
        return sum(ov_message_count(m) for m in self.messages)


@dataclass(slots=True)
class SessionRound:
    """One session's work in one round, and what came of it."""

    session: SessionRef
    state: AppliedState
    units: list[Unit] = field(default_factory=list)
    failed_entry: Entry | None = None
    """An entry whose messages could not even be built (a handler failure)."""
    failure: BaseException | None = None
    settled: bool = False
    base: int | None = None
    intent: Intent | None = None
    added: int = 0
    pending_tokens: int | None = None
    active_after: int | None = None
    """OV's active message count after this round's write (its answer's ``message_count``)."""
    round_start: str | None = None
    """The session's applied stream id before this round (``plan_round`` sets it)."""
    done: bool = False

    @property
    def messages(self) -> list[OVMessage]:
        return [m for u in self.units for m in u.messages]

    @property
    def entries(self) -> list[Entry]:
        return [u.entry for u in self.units]

    @property
    def grows_ov(self) -> bool:
        """Whether the round put messages of the session in OV: written now, or found there from
        an interrupted write it settled. Its snapshot must then catch up."""
        return bool(self.messages) or self.settled

    @property
    def imports_into_unknown(self) -> bool:
        """It writes an import while capture keeps no state of the session: new to capture, or
        its state expired (then OV already holds the session, and the import must not land)."""
        fresh = self.state.last_id is None and self.state.captured == 0
        return fresh and any(u.messages and u.entry.event and u.entry.event.import_transcript for u in self.units)

    def make_intent(self) -> Intent:
        assert self.base is not None
        return intent_of(self.base, [u for u in self.units if not u.skip])


def intent_of(base: int, units: list[Unit]) -> Intent:
    """The intent of writing ``units`` (in order) on top of OV's total ``base``."""
    events = [u.entry.event.event_id if u.entry.event else "" for u in units]
    return Intent(base, [(u.entry.id, u.ov_count) for u in units], events, [u.captured for u in units])


def drop_written(messages: list[OVMessage], written: int) -> list[OVMessage]:
    """``messages`` without the first ``written`` OV messages (whole messages only)."""
    done = 0
    for i, message in enumerate(messages):
        count = ov_message_count(message)
        if done + count > written:
            return messages[i:]
        done += count
    return []


SKIP_APPLIED = "applied before"
SKIP_EVENT_SEEN = "event seen"
SKIP_SETTLED = "written before a crash"
SKIP_COMMIT_MARKER = "commit marker"
SKIP_RELEASE_MARKER = "release marker"
_DUPLICATES = frozenset({SKIP_APPLIED, SKIP_EVENT_SEEN, SKIP_ADVANCEMENT_SEEN, SKIP_RELEASE_MARKER})
"""Skips that say nothing new about the transcript (``captured`` stays)."""


def plan_round(
    settings: Settings,
    session: SessionRef,
    entries: list[Entry],
    state: AppliedState,
    *,
    isolate: bool = False,
    in_ov: bool = False,
    numbers: Placeholders | None = None,
) -> SessionRound:
    """The units of this round, in stream order; stops before an entry that fails to convert.
    What each writes is redacted (``redacted``), numbered by ``numbers`` (the session's).

    ``in_ov``: OV holds messages of the session though capture keeps no state of it (its
    state expired, ``sessionStateTtlS``): the session is known, so an import writes nothing.
    """
    plan = SessionRound(session, state, round_start=state.last_id)
    numbers = numbers or Placeholders()
    seen = set(state.advancements)
    seen_events = set(state.event_ids)
    writing = False
    captured = state.captured  # as finish_state will have it before each entry
    for entry in entries:
        event = entry.event
        assert event is not None
        if entry.id in state.settled_ids:  # stored whole by the interrupted write just settled
            plan.units.append(Unit(entry, [], SKIP_SETTLED))
            seen_events.add(event.event_id)
            if event.advancement_key:
                seen.add(event.advancement_key)
            if entry.id not in state.captured_settled:  # else the intent's record of it counts already
                captured = captured_after(captured, event)
            continue
        if state.is_applied(entry.id):
            plan.units.append(Unit(entry, [], SKIP_APPLIED))
            continue
        if event.event_id in seen_events:
            plan.units.append(Unit(entry, [], SKIP_EVENT_SEEN))
            continue
        # Known: capture applied an entry of the session before, or one comes earlier in this round.
        known = in_ov or state.last_id is not None or state.captured > 0 or bool(plan.units)
        if event.release:
            reason: str | None = SKIP_RELEASE_MARKER
        elif event.commit is not None:  # a bypassed session's end (an older plugin sent it) asks for nothing
            reason = skip_reason(settings, event, seen, session_known=known) or SKIP_COMMIT_MARKER
        else:
            reason = skip_reason(settings, event, seen, session_known=known)
        if reason is not None:
            seen_events.add(event.event_id)
            plan.units.append(Unit(entry, [], reason))
            if reason not in _DUPLICATES:
                captured = captured_after(captured, event)
            continue
        start = turn_start(event, captured)
        try:
            messages = redacted(
                settings, session, turn_to_ov_messages(event.messages, start, session.agent_id), numbers
            )
        except Exception as exc:  # a transcript convert cannot read: this entry fails, the ones before go on
            plan.failed_entry, plan.failure = entry, exc
            break
        if state.partial_id == entry.id:
            messages = drop_written(messages, state.partial_skip)
        if isolate and writing and messages:
            break
        writing = writing or bool(messages)
        seen_events.add(event.event_id)
        if event.advancement_key:
            seen.add(event.advancement_key)
        captured = captured_after(captured, event)
        plan.units.append(Unit(entry, messages, None if messages else "no new messages", captured))
    return plan


def redacted(
    settings: Settings, session: SessionRef, messages: list[OVMessage], numbers: Placeholders
) -> list[OVMessage]:
    """``messages`` (what a turn writes to OV, tool calls' inputs from earlier turns included) as
    the agent's redaction leaves them (core.redaction; ``drop``: a message's parts become one
    notice). Whatever redacted the turn before (the plugin), placeholders are left as they are."""
    policy = settings.redaction_for(session.agent_id)
    if policy.mode == "off" or not messages:
        return messages
    out = []
    for message in messages:
        [masked], kinds = redact_messages([msgspec.to_builtins(message)], policy, numbers)
        if not kinds:
            out.append(message)
        elif policy.mode == "drop":
            out.append(msgspec.structs.replace(message, parts=[TextPart(text=withheld_notice(kinds))]))
        else:
            out.append(msgspec.convert(masked, OVMessage))
    return out


def commit_markers(plan: SessionRound) -> list[CommitReason]:
    """Reasons of the commit markers this round takes (duplicates left out)."""
    return [
        u.entry.event.commit
        for u in plan.units
        if u.skip == SKIP_COMMIT_MARKER and u.entry.event is not None and u.entry.event.commit
    ]


def finish_state(plan: SessionRound) -> AppliedState:
    """The session's applied state once every unit of ``plan`` is in OV."""
    state = plan.state
    for unit in plan.units:
        if unit.skip == SKIP_APPLIED:
            continue
        state.advance(unit.entry.id)
        if unit.skip in _DUPLICATES:
            continue
        event = unit.entry.event
        assert event is not None
        state.remember_event(event.event_id)
        if unit.entry.id not in state.captured_settled:  # else its intent's record counted it
            state.captured = captured_after(state.captured, event)
        if event.advancement_key:
            state.remember_advancement(event.advancement_key)
    if any(u.skip == SKIP_RELEASE_MARKER for u in plan.units):
        state.parked = None  # every dead letter of the session came before its release marker
    if plan.base is not None:
        state.total = plan.base + plan.added
    if state.partial_id is not None and any(u.entry.id == state.partial_id for u in plan.units):
        state.partial_id, state.partial_skip = None, 0
    return state
