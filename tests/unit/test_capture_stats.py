"""What a round counts (workers.capture.services.CaptureStats.count_applied): every entry an
interrupted owner wrote and this round settled counts once as settled, held by the round or not
(the capture order tier's invariant: applied + settled = entries)."""

from __future__ import annotations

import pytest

from workers.capture.plan import SKIP_APPLIED, SKIP_SETTLED, Entry, SessionRef, SessionRound, Unit
from workers.capture.services import CaptureStats
from workers.store.applied import AppliedState

SESSION = SessionRef("s", "main", None, "-.main", 0, "applied", "parked")


def _round(settled_ids: set[str], units: list[tuple[str, str | None]]) -> SessionRound:
    state = AppliedState()
    state.settled_ids = set(settled_ids)
    plan = SessionRound(SESSION, state, settled=bool(settled_ids))
    plan.units = [Unit(Entry(i, None), [], skip) for i, skip in units]
    return plan


@pytest.mark.parametrize(
    ("settled_ids", "units", "counted"),
    [
        (set(), [("1-0", None), ("2-0", None)], (2, 0, 0)),  # applied, nothing settled
        ({"1-0"}, [("1-0", SKIP_SETTLED), ("2-0", None)], (1, 1, 0)),  # settled in the round
        # settled from the intent, the entries pending elsewhere (a lost lease): counted now,
        # and when they arrive later they are applied before (skipped)
        ({"1-0", "2-0"}, [("3-0", None)], (1, 2, 0)),
        ({"1-0", "2-0"}, [("2-0", SKIP_SETTLED), ("3-0", None)], (1, 2, 0)),
        (set(), [("1-0", SKIP_APPLIED)], (0, 0, 1)),
    ],
)
def test_each_settled_entry_counts_once(settled_ids, units, counted) -> None:
    stats = CaptureStats()
    stats.count_applied(_round(settled_ids, units))
    assert (stats.applied, stats.settled, stats.skipped) == counted
