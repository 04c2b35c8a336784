"""Reading OV 0.5.2's phase-2 task states: what a task read means for its commit.

Shared by the poller job and compact's inline commit, so both read OV's task
states the same way.
"""

from __future__ import annotations

from typing import Any, Literal

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
