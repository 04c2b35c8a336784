"""When the sweep (workers.commits.sweep) looks at each commit in flight.

The sweep's index (``Keys.commits_in_flight``: in-flight slot -> score) hands an entry to a
look when its score is ``SWEEP_INTERVAL_S`` old (``CLAIM_STALE``, which sets it to now: the
next look is ``SWEEP_INTERVAL_S`` later). What can go wrong decides how soon a commit is
looked at again:

- its job *running*: the worker may die under it, and a commit should not wait long for it:
  every ``SWEEP_INTERVAL_S``, from the moment the job starts
  (``CommitRecords.outcome_as_job_starts``);
- its job *waiting* on its line (or in a schedule): only a worker dying between popping it
  and starting it (milliseconds), or a failover losing it, strands it: every
  ``WAITING_LOOK_S``, so that one found stranded (at two looks, 3 s apart) is resumed within
  about 15 s of its request. A look costs Redis about six round trips (the slot, the record,
  the job, its line) and the worker a job's decode; a burst of commits waiting their turn was
  looked at every 3 s each, a sixth of what a commit cost Redis (bench/RESULTS.md);
- its phase 2 read from the due set: only its entry lost needs the sweep: ``POLLING_LOOK_S``.
"""

from __future__ import annotations

import time
from typing import Any

from core.config import Settings
from workers.store.keys import Keys

SWEEP_INTERVAL_S = 3.0
"""How long an in-flight commit whose job runs goes unlooked-at (each look hands it on for this long)."""
WAITING_LOOK_S = 10.0
"""How much later a commit whose job waits on its line (or in a schedule) is looked at: at its
request, and again after each look that finds it waiting (30 s left a job a killed worker had
popped for 33 s: the chaos tier's commit after a SIGKILL is final within 30 s)."""
POLLING_LOOK_S = 30.0
"""How much later a commit whose phase 2 is read from the due set is looked at again: only
its entry lost (a failover's unreplicated write) needs the sweep."""


def look_in(client: Any, settings: Settings, inflight: str, seconds: float, *, new: bool = False) -> Any:
    """Have the sweep look at the commit in flight at ``inflight`` (its slot) ``seconds`` from
    now: its index entry's score, on ``client`` (a client or a pipeline). Only an entry there
    already is moved, unless the commit is ``new`` (indexed before its slot is written)."""
    score = time.time() + seconds - SWEEP_INTERVAL_S  # due when SWEEP_INTERVAL_S old (CLAIM_STALE)
    return client.zadd(Keys(settings.key_prefix).commits_in_flight(), {inflight: score}, xx=not new)
