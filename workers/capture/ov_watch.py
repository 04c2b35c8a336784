"""Whether OV answers this capture worker, known before a turn finds out, and one wake-up
for every shard when it answers again.

A shard learns that OV is away when a round fails; a worker with no turns to write would
go on saying ``ov=ok`` in ``ovstream status`` and ``ovstream health`` while OV is down,
and log nothing. So each worker asks OV's ``/health`` every ``CAPTURE_OV_PROBE_S`` (in a
task of its own: a slow OV never delays a lease renewal; every ``CAPTURE_OV_SCOUT_S`` while
a shard is paused), logs once when OV goes away and once when it is back, and its health
record carries what it saw.

A shard whose round finds OV failing pauses with a backoff that doubles up to
``captureOvDownBackoffMaxS``: each shard waiting out its own pause would resume up to that
long after OV did. So one paused shard is the scout (``OvOutage``): it tries again every
``CAPTURE_OV_SCOUT_S`` (a real round: OV's ``/health`` answers while its writes fail), and
the first round that goes through, any shard's, or OV's ``/health`` answering again, wakes
every paused shard at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from core import defaults

log = logging.getLogger(__name__)


class Pausable(Protocol):
    """What ``OvOutage`` needs of a shard consumer (workers.capture.shard.ShardConsumer)."""

    ov_down_until: float
    woken: asyncio.Event
    backlog: list  # type: ignore[type-arg]
    lost: bool
    released: bool


class OvOutage:
    """The shards of one capture worker while OV fails: who scouts, and one wake-up for all."""

    def __init__(self, scout_s: float = defaults.CAPTURE_OV_SCOUT_S) -> None:
        self.scout_s = scout_s
        self.scout: Pausable | None = None

    def pause_s(self, shard: Pausable, backoff_s: float) -> float:
        """How long ``shard`` pauses after a round that found OV failing: ``backoff_s``, or at
        most ``scout_s`` for the scout (the first shard paused, or any once the scout left
        or has nothing to try)."""
        scout = self.scout
        if scout is None or scout is shard or scout.lost or scout.released or not scout.backlog:
            self.scout = shard
            return min(backoff_s, self.scout_s)
        return backoff_s

    def paused(self, shards: Iterable[Pausable], now: float) -> bool:
        return any(s.ov_down_until > now for s in shards)

    def back(self, shards: Iterable[Pausable]) -> int:
        """OV took a write (or answers ``/health`` again): every paused shard tries now.
        Returns how many were woken."""
        self.scout = None
        woken = 0
        for shard in shards:
            if shard.ov_down_until:
                shard.ov_down_until, woken = 0.0, woken + 1
                shard.woken.set()
        return woken


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
        urgent: Callable[[], bool] = lambda: False,
        on_back: Callable[[], object] = lambda: None,
    ) -> None:
        self.probe, self.where, self.who = probe, where, who
        self.every_s, self.timeout_s = every_s, timeout_s
        self.urgent, self.on_back = urgent, on_back
        """``urgent``: a shard is paused (ask every ``CAPTURE_OV_SCOUT_S``); ``on_back``: OV
        answers again after it did not (wake the shards)."""
        self.state = "ok"

    async def check(self) -> str:
        """Ask once; log a change of state; return it."""
        state = await self.probe(self.timeout_s)
        if state != "ok" and self.state == "ok":
            log.warning("%s: OV %s at %s; turns wait in their streams until it answers", self.who, state, self.where)
        elif state == "ok" and self.state != "ok":
            log.info("%s: OV answers again at %s", self.who, self.where)
            self.on_back()
        self.state = state
        return state

    async def run(self) -> None:
        """``check`` every ``every_s`` (while ``urgent``, every ``CAPTURE_OV_SCOUT_S``) until cancelled."""
        while True:
            await self.check()
            waited = 0.0
            while waited < self.every_s:
                step = min(defaults.CAPTURE_OV_SCOUT_S, self.every_s - waited)
                await asyncio.sleep(step)
                waited += step
                if self.state != "ok" or self.urgent():
                    break
