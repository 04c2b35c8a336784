"""Whether OV answers this capture worker, known before a turn finds out.

A shard learns that OV is away when a round fails; a worker with no turns to write would
go on saying ``ov=ok`` in ``ovstream status`` and ``ovstream health`` while OV is down,
and log nothing. So each worker asks OV's ``/health`` every ``CAPTURE_OV_PROBE_S`` (in a
task of its own: a slow OV never delays a lease renewal), logs once when OV goes away and
once when it is back, and its health record carries what it saw.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core import defaults

log = logging.getLogger(__name__)


class OvWatch:
    """The last answer of OV's ``/health`` to this worker (``state``: ``ok`` or why not)."""

    def __init__(
        self,
        probe: Callable[[float], Awaitable[str]],
        where: str,
        who: str,
        *,
        every_s: float = defaults.CAPTURE_OV_PROBE_S,
        timeout_s: float = defaults.CAPTURE_OV_PROBE_TIMEOUT_S,
    ) -> None:
        self.probe, self.where, self.who = probe, where, who
        self.every_s, self.timeout_s = every_s, timeout_s
        self.state = "ok"

    async def check(self) -> str:
        """Ask once; log a change of state; return it."""
        state = await self.probe(self.timeout_s)
        if state != "ok" and self.state == "ok":
            log.warning("%s: OV %s at %s; turns wait in their streams until it answers", self.who, state, self.where)
        elif state == "ok" and self.state != "ok":
            log.info("%s: OV answers again at %s", self.who, self.where)
        self.state = state
        return state

    async def run(self) -> None:
        """``check`` every ``every_s`` until cancelled."""
        while True:
            await self.check()
            await asyncio.sleep(self.every_s)
