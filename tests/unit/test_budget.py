"""core.budget: the reserve / archive / session split."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.budget import ContextBudget, allocate_context_budget
from core.defaults import ARCHIVE_MAX_TOKENS, DEFAULT_TOKEN_BUDGET


@pytest.mark.parametrize(
    ("total", "instruction_tokens", "expected"),
    [
        # missing or non-positive: the default 128k
        (None, 0, (128_000, 20_000, 8_000, 100_000)),
        (0, 0, (128_000, 20_000, 8_000, 100_000)),
        (-5, 0, (128_000, 20_000, 8_000, 100_000)),
        (float("nan"), 0, (128_000, 20_000, 8_000, 100_000)),
        (float("inf"), 0, (128_000, 20_000, 8_000, 100_000)),
        # under 20k the whole budget is reserve: never more than the budget
        (1, 0, (1, 1, 0, 0)),
        (100, 0, (100, 100, 0, 0)),
        (20_000, 0, (20_000, 20_000, 0, 0)),
        # from 20k the reserve is the 20k floor until 15% passes it
        (30_000, 0, (30_000, 20_000, 1_500, 8_500)),
        (40_000, 0, (40_000, 20_000, 3_000, 17_000)),
        (50_000, 0, (50_000, 20_000, 4_500, 25_500)),
        (128_000, 0, (128_000, 20_000, 8_000, 100_000)),
        # above 133,334 the 15% passes the floor
        (200_000, 0, (200_000, 30_000, 8_000, 162_000)),
        (1_000_000, 0, (1_000_000, 150_000, 8_000, 842_000)),
        # instruction tokens come out of the usable part
        (128_000, 5_000, (128_000, 20_000, 8_000, 95_000)),
        (50_000, 10_000, (50_000, 20_000, 3_000, 17_000)),
        (1_000, 5_000, (1_000, 1_000, 0, 0)),
        (128_000, -50, (128_000, 20_000, 8_000, 100_000)),  # negative treated as none
        # a float budget is floored
        (30_000.9, 0, (30_000, 20_000, 1_500, 8_500)),
        # 15% of 200k rounds exactly (no float noise): 30,000 not 30,001
        (200_000, 1, (200_000, 30_000, 8_000, 161_999)),
    ],
)
def test_allocate_context_budget(
    total: float | None, instruction_tokens: int, expected: tuple[int, int, int, int]
) -> None:
    budget = allocate_context_budget(total, instruction_tokens)  # type: ignore[arg-type]
    assert (budget.total, budget.reserved, budget.archive, budget.session) == expected
    assert all(type(v) is int for v in dataclasses.astuple(budget))


def test_instruction_tokens_default_to_zero() -> None:
    assert allocate_context_budget(50_000) == allocate_context_budget(50_000, 0)


def test_budget_is_frozen() -> None:
    budget = allocate_context_budget(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.session = 1  # type: ignore[misc]
    assert isinstance(budget, ContextBudget)


totals = st.one_of(st.none(), st.integers(min_value=-1_000, max_value=10_000_000))
instructions = st.integers(min_value=0, max_value=2_000_000)


@given(totals, instructions)
def test_no_part_is_negative_and_parts_fit(total: int | None, instruction_tokens: int) -> None:
    b = allocate_context_budget(total, instruction_tokens)
    assert b.total > 0
    assert min(b.reserved, b.archive, b.session) >= 0
    assert b.reserved + b.archive + b.session <= b.total
    assert b.reserved + b.archive + b.session + instruction_tokens >= b.total or (b.archive == 0 and b.session == 0)
    assert b.archive <= ARCHIVE_MAX_TOKENS
    assert b.archive <= b.session or b.archive == b.session == 0


@given(st.integers(min_value=-1_000, max_value=0))
def test_non_positive_means_default(total: int) -> None:
    assert allocate_context_budget(total).total == DEFAULT_TOKEN_BUDGET


@given(st.integers(min_value=1, max_value=10_000_000))
def test_reserve_is_at_least_fifteen_percent(total: int) -> None:
    b = allocate_context_budget(total)
    assert b.reserved * 100 >= total * 15
    assert b.reserved == min(total, max(b.reserved, 20_000))


@given(st.integers(min_value=1, max_value=10_000_000), st.integers(min_value=0, max_value=100_000))
def test_more_instructions_never_grow_the_session(total: int, extra: int) -> None:
    assert allocate_context_budget(total, extra).session <= allocate_context_budget(total, 0).session
