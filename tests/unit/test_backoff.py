"""The one backoff policy (core.backoff): exponential, capped, a pure function of the failures."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.backoff import Backoff


@pytest.mark.parametrize(
    ("policy", "failures", "wait"),
    [
        (Backoff(0.5, 10.0), 0, 0.0),
        (Backoff(0.5, 10.0), 1, 0.5),
        (Backoff(0.5, 10.0), 2, 1.0),
        (Backoff(0.5, 10.0), 5, 8.0),
        (Backoff(0.5, 10.0), 6, 10.0),
        (Backoff(0.5, 10.0), 10_000, 10.0),
        (Backoff(0.8, 0.5), 3, 0.8),  # a cap below the first wait: the first wait
        (Backoff(0.25), 4, 2.0),  # uncapped
        (Backoff(0.0, 5.0), 3, 0.0),  # no wait configured
        (Backoff(1.0, 100.0, factor=3.0), 3, 9.0),
    ],
)
def test_the_wait_after_failures_in_a_row(policy, failures, wait):
    assert policy.delay(failures) == pytest.approx(wait)


@given(
    first=st.floats(min_value=0.001, max_value=60),
    longest=st.floats(min_value=0.001, max_value=3600),
    failures=st.integers(min_value=1, max_value=10_000),
)
def test_waits_never_shrink_and_never_pass_the_cap(first, longest, failures):
    policy = Backoff(first, longest)
    assert policy.delay(failures) <= policy.delay(failures + 1) <= max(first, longest)
    assert policy.delay(failures) >= min(first, max(first, longest))
    assert math.isfinite(policy.delay(failures))
