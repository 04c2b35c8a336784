"""core.scaling: the capture replicas a backlog asks for, capped by the streams read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.scaling import capture_replicas


@pytest.mark.parametrize(
    ("backlog", "streams", "replicas"),
    [
        (0, 4, 1),  # idle: still one (it settles writes and refreshes snapshots)
        (1, 4, 1),
        (200, 4, 1),
        (201, 4, 2),
        (10_000, 4, 4),  # capped: a fifth process would own no stream
        (10_000, 12, 12),  # a reshard 4 -> 8 draining: every stream read
        (10_000, 8, 8),  # after it
        (-5, 4, 1),
    ],
)
def test_capture_replicas(backlog: int, streams: int, replicas: int) -> None:
    assert capture_replicas(backlog, streams) == replicas


@given(st.integers(-10, 10**7), st.integers(0, 256), st.integers(1, 10**4))
def test_replicas_are_between_one_and_the_streams(backlog: int, streams: int, per: int) -> None:
    n = capture_replicas(backlog, streams, per_replica=per)
    assert 1 <= n <= max(streams, 1)
    assert n >= min(max(streams, 1), -(-max(backlog, 0) // per))  # enough for the backlog
