"""What one TurnEvent contributes to a session, decided without IO.

Capture (workers.capture.plan) and assemble's lag overlay ask the same two
questions of an event, so the answers live here once:

- ``skip_reason``: the seed's rules for events that are never written to OV
  (autoCapture off, heartbeat, bypassed session, a turn already taken).
- ``turn_messages``: the OpenClaw messages the event adds to the transcript
  (``messages[pre_prompt_message_count:]``).

``uncaptured_turns`` is the overlay by identity: from the events of a session
that its snapshot does not reflect yet (read from the stream, or still held
by the plugin), the turns the model must see, each exactly once, whatever the
host passes as ``messages``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.config import Settings
from core.events import TurnEvent
from core.ids import is_bypassed, ov_session_id, resolve_agent_id
from core.session import SessionAddress

SKIP_AUTO_CAPTURE_OFF = "autoCapture off"
SKIP_HEARTBEAT = "heartbeat"
SKIP_BYPASSED = "bypassed"
SKIP_ADVANCEMENT_SEEN = "advancement seen"
SKIP_SESSION_KNOWN = "import into a known session"


def address_of(event: TurnEvent, agent_prefix: str) -> SessionAddress:
    """The session an event belongs to (the seed's id and agent rules); ValueError when it names none."""
    sid = ov_session_id(event.session_id, event.session_key)
    return SessionAddress(sid, resolve_agent_id(event.session_key, event.agent_id, agent_prefix), event.user)


def skip_reason(
    settings: Settings, event: TurnEvent, seen_advancements: Collection[str], *, session_known: bool
) -> str | None:
    """Why ``event`` writes nothing to OV, or None when it is a turn to capture.

    ``session_known``: capture has applied an entry of this session before, or
    an earlier entry of it is in the same batch. An import (the transcript as
    the host held it when a process first saw the session) is written only into
    a session capture has never touched: after any turn ovstream published it
    would repeat that turn, and a second import (another gateway, a restart)
    writes nothing.
    """
    if event.import_transcript and session_known:
        return SKIP_SESSION_KNOWN
    if not settings.auto_capture:
        return SKIP_AUTO_CAPTURE_OFF
    if event.is_heartbeat:
        return SKIP_HEARTBEAT
    if is_bypassed(settings.bypass_session_patterns, event.session_id, event.session_key):
        return SKIP_BYPASSED
    if event.advancement_key and event.advancement_key in seen_advancements:
        return SKIP_ADVANCEMENT_SEEN
    return None


def turn_start(event: TurnEvent, captured: int) -> int:
    """Where ``event``'s new messages start in ``event.messages``, for capture.

    ``pre_prompt_message_count``, as the seed says; but an afterTurn event (it carries the
    whole transcript) of a session capture is behind (``0 < captured < pre_prompt_message_count``:
    an earlier event was lost, trimmed or published out of order) starts at ``captured``,
    so the gap is filled from the messages it carries. A commitTurn event carries only
    its own turn: nothing to fill from.
    """
    start = max(event.pre_prompt_message_count, 0)
    if event.advancement_key is None and 0 < captured < start:
        return captured
    return start


def captured_after(captured: int, event: TurnEvent) -> int:
    """The session's captured count (OpenClaw messages in OV) once ``event`` is applied."""
    if event.advancement_key:  # commitTurn: the event carries only its own turn
        return captured + max(0, len(event.messages) - event.pre_prompt_message_count)
    return len(event.messages)  # afterTurn: the event carries the whole transcript


def turn_messages(event: TurnEvent) -> list[dict[str, Any]]:
    """The OpenClaw messages ``event`` adds: an afterTurn event carries the whole
    transcript and marks where the turn starts; a commitTurn event only its turn."""
    start = max(event.pre_prompt_message_count, 0)
    return list(event.messages[start:])


@dataclass(frozen=True, slots=True)
class PendingTurn:
    """One turn the snapshot does not hold yet, with the messages it adds."""

    event_id: str
    messages: list[dict[str, Any]]


def uncaptured_turns(
    settings: Settings,
    events: Iterable[TurnEvent],
    *,
    reflected_event_ids: Collection[str],
    reflected_advancements: Collection[str],
    session_known: bool,
) -> list[PendingTurn]:
    """The turns of ``events`` that the snapshot does not reflect, in publish order.

    ``events`` may hold one event twice (read from the stream and still held by
    the plugin, or re-sent by the publisher) and events the snapshot already
    reflects (by event id, or a commitTurn retried under a new event id with
    the same advancement key): each turn comes out once. Events capture would
    skip (heartbeats, bypassed sessions, an import into a known session, which
    includes one after any earlier event of the session) and commit markers
    add nothing, as in OV.
    """
    seen_events = set(reflected_event_ids)
    seen_advancements = set(reflected_advancements)
    ordered = sorted(events, key=lambda e: e.published_at)  # stable: stream order breaks ties
    out: list[PendingTurn] = []
    for event in ordered:
        if event.event_id in seen_events:
            continue
        seen_events.add(event.event_id)
        known, session_known = session_known, True  # as capture: any earlier entry makes it known
        if event.commit is not None:
            continue
        if skip_reason(settings, event, seen_advancements, session_known=known) is not None:
            continue
        if event.advancement_key:
            seen_advancements.add(event.advancement_key)
        messages = turn_messages(event)
        if messages:
            out.append(PendingTurn(event.event_id, messages))
    return out


def last_event_id(reflected_event_ids: Sequence[str], pending: Sequence[PendingTurn]) -> str:
    """The newest turn of the session that assemble knows of ("" when none)."""
    if pending:
        return pending[-1].event_id
    return reflected_event_ids[-1] if reflected_event_ids else ""


def recall_turn_key(ov_session_id: str, scope: str, prompt: str, last_event: str, history_len: int) -> str:
    """Names one user turn of one session, for the once-per-turn recall cache.

    Within a turn the host calls assemble once per model request with the same
    prompt, and no new turn event exists until the turn is committed, so the
    key is stable across the tool loop and changes with the next turn even
    when its text repeats. Without any captured or pending event the history
    length stands in for the event.
    """
    marker = last_event or f"len:{history_len}"
    digest = hashlib.sha256("\x00".join((ov_session_id, scope, marker, prompt)).encode("utf-8"))
    return digest.hexdigest()[:32]
