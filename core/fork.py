"""A forked subagent's context: its parent's as it was at the spawn, then its own (pure).

A fork (``sessions_spawn`` with ``context: "fork"``) copies the parent's transcript into the
child's, up to the spawn: the child's first ``fork_at`` host messages are the parent's.
ovstream writes none of them to the child's OV session (capture starts at the child's first
turn), so assemble builds the child's context from three parts, oldest first:

1. the parent's snapshot as it was at the spawn (its archive overview and its records: the
   parent's host messages ``[0, parent.captured_through)``);
2. the copied messages that snapshot did not reflect yet, ``[parent.captured_through,
   fork_at)`` of the child's transcript: the spawning turn itself, typically;
3. the child's own records (what capture wrote of its turns, from ``fork_at`` on).

The child's messages past what its own snapshot reflects follow as the overlay, as for any
session (``fork_captured``). Budget trimming drops the oldest first: the parent's.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.assemble_plan import SessionBase, session_base_of
from core.events import ContextSnapshot
from core.messages.convert import ov_to_agent_messages
from core.messages.model import AgentMessage


def copied_span(parent: ContextSnapshot | None, fork_at: int) -> tuple[int, int]:
    """Part 2's range of the child's host messages: from what the parent's snapshot reflects
    (never past the fork) to the fork."""
    reflected = parent.captured_through if parent is not None else 0
    return min(max(reflected, 0), fork_at), fork_at


def fork_captured(child: ContextSnapshot | None, fork_at: int) -> int:
    """How many of the child's host messages the fork's base reflects: the fork's copy, and
    what the child's own snapshot reflects past it."""
    return max(fork_at, child.captured_through if child is not None else 0)


def fork_base(
    parent: ContextSnapshot | None, copied: Sequence[AgentMessage], child: ContextSnapshot | None
) -> SessionBase:
    """The three parts as one base. The overview is the parent's, then the child's own (its
    archives, once it was committed), a blank line between."""
    overviews = [s.latest_archive_overview.strip() for s in (parent, child) if s is not None]
    overview = "\n\n".join(o for o in overviews if o)
    archived = any(s.total_archives > 0 or s.pre_archive_abstracts for s in (parent, child) if s is not None)
    parent_records = parent.messages if parent is not None else []
    child_records = child.messages if child is not None else []
    messages = [*ov_to_agent_messages(parent_records), *copied, *ov_to_agent_messages(child_records)]
    return session_base_of(
        overview,
        has_archive=bool(overview) or archived,
        record_count=len(parent_records) + len(copied) + len(child_records),
        messages=messages,
    )
