"""When capture may grow a session's snapshot by what it wrote, instead of reading OV.

Pure. After a batch write, the snapshot OV ``/context`` would now return is the stored one
plus the written messages, exactly when: the stored snapshot reflects every entry before
this round (its stream id is the round's starting point), OV's active count after the
write is the stored records plus what this round added (nothing else moved: no commit, no
earlier write the snapshot lacks, no budget trimming by ``/context``), and no written tool
output is long enough for OV to keep only a stub of it. Otherwise only a read can tell.
Assemble reads records by role and parts only, so appended bodies convert as OV's would.

A session OV never held a message of (its total count was 0 before the round) needs no
stored snapshot: ``/context`` is then exactly what the round wrote (``first_records``).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.events import ContextSnapshot
from core.ov.messages import OVMessage, ToolPart

SAFE_TOOL_OUTPUT_CHARS = 16_000
"""Longest tool output a grown snapshot takes: OV externalizes long outputs (a stub and a
``tool_output_ref``; 20,000 characters by default where OV documents it), which only its
own ``/context`` shows."""


def _long_output(message: OVMessage) -> bool:
    return any(isinstance(p, ToolPart) and len(p.tool_output) >= SAFE_TOOL_OUTPUT_CHARS for p in message.parts)


def grown_records(
    snapshot: ContextSnapshot | None,
    written: Sequence[OVMessage],
    *,
    round_start: str | None,
    added: int,
    active_after: int,
) -> list[OVMessage] | None:
    """The snapshot's message records with ``written`` appended, when that is what OV's
    ``/context`` would return now; None when it may not be (read OV then).

    ``round_start``: the stream id the session's applied offset had before this round;
    ``added``: what OV says this round added; ``active_after``: OV's active message count
    after the write (``message_count`` of its answer).
    """
    if snapshot is None or round_start is None or snapshot.applied_stream_id != round_start:
        return None
    if added != len(written) or len(snapshot.messages) + added != active_after:
        return None
    if any(_long_output(m) for m in written):
        return None
    return [*snapshot.messages, *written]


def first_records(
    written: Sequence[OVMessage], *, ov_total_before: int | None, added: int, active_after: int
) -> list[OVMessage] | None:
    """The message records OV's ``/context`` returns after the first write to a session it
    never held a message of (``ov_total_before`` 0: no archive, nothing active), when the
    write added exactly ``written``; None when that is not certain (read OV then)."""
    if ov_total_before != 0 or added != len(written) or active_after != added:
        return None
    if any(_long_output(m) for m in written):
        return None
    return list(written)
