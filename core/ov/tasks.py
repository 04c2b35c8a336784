"""Reading OV 0.5.2's phase-2 task states: what a task read means for its commit.

Shared by the poller job and compact's inline commit, so both read OV's task
states the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from core.backoff import Backoff

FinalStatus = Literal["completed", "failed", "skipped"]
"""The final commit statuses a task read can decide (a timeout is the poller's own)."""


def memories_extracted(result: dict[str, Any] | None) -> int | None:
    """The count of memories a completed phase-2 task reports, when it reports one.

    0.5.2 answers ``{"memory_write": N, "memory_edit": M}`` (``{}`` for none);
    a ``total`` key, a list, or a ``memory_uris`` list are understood too.
    """
    if not isinstance(result, dict):
        return None
    value = result.get("memories_extracted")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dict):
        total = value.get("total")
        if isinstance(total, int):
            return total
        return sum(v for v in value.values() if isinstance(v, int) and not isinstance(v, bool))
    if isinstance(value, list):
        return len(value)
    uris = result.get("memory_uris")
    return len(uris) if isinstance(uris, list) else None


def task_verdict(task: Any) -> tuple[FinalStatus, dict[str, Any]] | None:
    """What a read of the phase-2 task means for the commit: its final status and the
    outcome fields to record, or None while the task still runs. Shared by the poller
    and compact's inline commit so both read OV's task states the same way."""
    if task.status == "completed":
        return "completed", {"memories_extracted": memories_extracted(task.result)}
    if task.status in ("failed", "cancelled"):
        return "failed", {"error": str(task.error or f"phase 2 {task.status}")}
    if task.status == "skipped":
        return "skipped", {}
    return None


@dataclass(frozen=True, slots=True)
class Phase2Read:
    """What one read of a phase-2 task decides for its commit."""

    status: FinalStatus | Literal["timeout"] | None
    """The final status to record, or None: read again later."""
    fields: dict[str, Any]
    """Outcome fields to record with the status."""
    failed_reads: int
    """Consecutive failed reads so far (carried to the next read)."""


def judge_phase2_read(
    task: Any,
    error: Exception | None,
    *,
    failed_reads: int,
    deadline_passed: bool,
    deadline_s: float,
) -> Phase2Read:
    """One read of the task (``task``, or the ``error`` reading it raised), judged the same
    way by the poller job and compact's inline commit: a final task state ends the commit;
    a failed read only counts (an OV restart outlasts a few reads); past the deadline it
    timed out (the poller checks again later, ``PHASE2_RECHECK_DELAYS_S``)."""
    if error is not None:
        failed_reads += 1
    else:
        failed_reads = 0
        verdict = task_verdict(task)
        if verdict is not None:
            return Phase2Read(verdict[0], verdict[1], 0)
    if deadline_passed:
        why = f"phase 2 not finished within {deadline_s:g}s"
        if error is not None:
            why += f" (the last {failed_reads} task reads failed: {error})"
        return Phase2Read("timeout", {"error": why}, failed_reads)
    return Phase2Read(None, {}, failed_reads)


def next_read_delay(interval_s: float, failed_reads: int, doublings: int, longest_s: float) -> float:
    """Wait before the next task read: the poll interval, doubled per failed read in a row
    (at most ``doublings`` times), never more than ``longest_s``."""
    return Backoff(interval_s, longest_s).delay(min(failed_reads, doublings) + 1)
