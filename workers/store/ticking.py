"""A thread doing one step against Redis every few tenths of a second, until stopped: Redis
away is said once at WARNING and its return at INFO, never a traceback per tick."""

from __future__ import annotations

import logging
import threading

from workers.store.connection import REDIS_ERRORS

log = logging.getLogger(__name__)


class TickingThread(threading.Thread):
    """``tick()`` every ``interval_s`` until ``stop``. Redis trouble waits for the next tick:
    ``away`` (with the error and the interval) is said when it begins, ``back`` when it ends."""

    def __init__(self, name: str, interval_s: float, *, away: str, back: str) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s, self._away, self._back = interval_s, away, back
        self._stop_event = threading.Event()

    def tick(self) -> None:
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def run(self) -> None:
        failing = False
        while not self._stop_event.wait(self.interval_s):
            try:
                self.tick()
                if failing:
                    log.info("%s", self._back)
                failing = False
            except REDIS_ERRORS as exc:
                if not failing:
                    log.warning("%s (Redis: %s); trying every %.1fs", self._away, exc, self.interval_s)
                failing = True

    def stop(self) -> None:
        self._stop_event.set()
