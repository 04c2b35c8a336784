"""The one backoff policy: how long to wait after the n-th failure in a row.

Every wait-and-try-again in ovstream is this one rule, exponential and capped: OV calls
(``core.ov.client``), phase-2 task reads (``core.ov.tasks``), a capture shard pausing while
OV is away (``workers.capture.shard``), a process waiting for Redis
(``workers.store.connection``), a commit job waiting Redis out (``workers.commits.run``) and
the RQ worker starting again after losing Redis (``workers.commits.worker``).

Why a small module and not tenacity or stamina: those wrap one call in a retry loop, and
keep the loop's state in that call. Half of the waits here are not such a loop: a shard's
pause spans capture rounds (the round returns, the pause is the shard's state), a phase-2
read is retried by scheduling another RQ job (the failure count travels in the job's
arguments, possibly to another process), and the Redis wait must hear a SIGTERM within a
tenth of a second. What they share is the arithmetic, so the arithmetic is what is shared:
a pure function of the failure count. No jitter: every wait is per shard, per job or per
process, and their starts are already spread by the events that cause them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Wait ``first_s`` after the first failure in a row, ``factor`` times longer after each
    next one, never longer than ``longest_s``."""

    first_s: float
    longest_s: float = math.inf
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row (0 or fewer: no wait)."""
        if failures <= 0 or self.first_s <= 0:
            return 0.0
        exponent = min(failures - 1, 64)  # 2**64 times any first_s is past every cap already
        return min(self.first_s * self.factor**exponent, max(self.first_s, self.longest_s))
