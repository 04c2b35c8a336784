"""Cooperative CPU slices: long computations of a shard consumer let the event loop run.

A round decodes, converts and encodes up to ``capture_round_max_bytes`` of transcripts. On the
event loop that is tens or hundreds of milliseconds of CPU, more on a busy machine, and the
lease renewals of every shard of the process wait behind it: a round longer than its lease
loses the shard mid-way (issue: a slow round lost its lease and a healthy backlog was
dead-lettered). Such loops call ``await slice.breathe()`` per item: it yields once the slice's
CPU budget (``core.defaults.CAPTURE_CPU_SLICE_S``) is spent, so the loop never waits longer
than one slice for the renewal.
"""

from __future__ import annotations

import asyncio
import time

from core.defaults import CAPTURE_CPU_SLICE_S


class CpuSlice:
    """One computation's budget between yields to the event loop."""

    __slots__ = ("budget_s", "until")

    def __init__(self, budget_s: float = CAPTURE_CPU_SLICE_S) -> None:
        self.budget_s = budget_s
        self.until = time.perf_counter() + budget_s

    async def breathe(self) -> None:
        """Yield to the loop when this slice's budget is spent (then start a new one)."""
        if time.perf_counter() >= self.until:
            await asyncio.sleep(0)
            self.until = time.perf_counter() + self.budget_s
