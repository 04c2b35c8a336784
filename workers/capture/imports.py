"""What a round did with the imports it applied (``openclaw ovstream import``), as records
written in the fenced write that acks their entries (workers.store.imports says what they mean).
Made before the round's state is finished: a write that settled an interrupted one (part of the
import already in OV) is known by the state's partial entry, which finishing clears.
"""

from __future__ import annotations

from core.config import Settings
from workers.capture.fence import HashWrite
from workers.capture.plan import SKIP_APPLIED, SKIP_SETTLED, SessionRound
from workers.store.imports import ImportOutcome, ImportRecord, encode_record
from workers.store.keys import session_keys


def import_records(settings: Settings, plan: SessionRound) -> list[HashWrite]:
    """One hash write of the session's import records for this round's import entries (none for
    an entry read again that was applied before: its record stands)."""
    fields: dict[str, str] = {}
    state = plan.state
    for unit in plan.units:
        event = unit.entry.event
        if event is None or not event.import_transcript or unit.skip == SKIP_APPLIED:
            continue
        outcome: ImportOutcome
        if unit.skip is None:
            interrupted = state.partial_id == unit.entry.id and state.partial_skip > 0
            outcome = "partly" if interrupted else "written"
        else:
            outcome = "partly" if unit.skip == SKIP_SETTLED else "already"
        record = ImportRecord(run=event.import_run, entry=unit.entry.id, outcome=outcome, messages=unit.ov_count)
        fields[event.event_id] = encode_record(record)
    if not fields:
        return []
    key = session_keys(settings, plan.session.address).imports
    return [HashWrite(key, fields, px=settings.session_state_ttl_s * 1000)]
