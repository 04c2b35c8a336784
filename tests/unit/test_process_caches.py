"""What a process keeps per session is bounded by bytes, not only by count (issue 44)."""

from __future__ import annotations

from workers.capture.settle import RECORD_BYTES, RecordedStates
from workers.rpc.context import recall_bytes
from workers.store.applied import AppliedState


def test_capture_records_are_bounded_by_bytes() -> None:
    key = "ovstream:{{s1}}:applied:main:session-{:04d}"
    one = len(key.format(0)) + RECORD_BYTES
    recorded = RecordedStates(max_bytes=3 * one)

    def state(i: int) -> AppliedState:
        return AppliedState(last_id=f"{i + 1}-0", total=i + 1)

    for i in range(10):
        recorded.remember(key.format(i), state(i))
    kept = [i for i in range(10) if not recorded.unconfirmed(key.format(i), state(i))]
    assert kept == [7, 8, 9]  # the newest three: what fits
    longer = "x" * (2 * one)  # a longer key costs more: it pushes out more
    recorded.remember(longer, AppliedState(last_id="1-0", total=1))
    assert all(recorded.unconfirmed(key.format(i), state(i)) for i in range(10))


def test_a_recall_block_costs_what_its_text_does() -> None:
    assert recall_bytes((0.0, "x" * 10_000)) > 10 * recall_bytes((0.0, "x" * 100)) / 2
    assert recall_bytes((0.0, "")) > 0
