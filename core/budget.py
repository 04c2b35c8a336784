"""Split of a model's token budget between output reserve, archive summary and
active session messages (assemble's full-context path).

The reserve follows the seed as drawn: max(15%, 20k), never more than the
budget. (The reference plugin applies the 20k floor only from a 40k budget
on; below 40k that leaves more room for messages but less for the answer. The
seed's rule is the one our issue asks for, so a budget under ~23.5k is all
reserve and assemble sends only what the caller already holds.)

Rounding: the reserve rounds up (output headroom is what a too-long prompt
costs), the archive share rounds down, and the session gets the exact rest, so
the three parts never add up to more than the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from core.defaults import (
    ARCHIVE_MAX_TOKENS,
    ARCHIVE_RATIO,
    DEFAULT_TOKEN_BUDGET,
    RESERVED_MIN_TOKENS,
    RESERVED_RATIO,
)

# Exact ratios: 0.15 * 100 in floats is 15.000000000000002, which would ceil to 16.
_RESERVED_SHARE = Fraction(RESERVED_RATIO).limit_denominator(10_000)
_ARCHIVE_SHARE = Fraction(ARCHIVE_RATIO).limit_denominator(10_000)


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """Token allowances of one assemble call; all non-negative integers."""

    total: int
    """The budget the split was made of (the default when none was given)."""
    reserved: int
    """Left free for the model's output."""
    archive: int
    """For the ``[Session History Summary]`` message."""
    session: int
    """For the active session messages."""


def _effective_total(total: int | float | None) -> int:
    if total is None or isinstance(total, bool):
        return DEFAULT_TOKEN_BUDGET
    if isinstance(total, float) and not math.isfinite(total):
        return DEFAULT_TOKEN_BUDGET
    whole = int(total)
    return whole if whole > 0 else DEFAULT_TOKEN_BUDGET


def allocate_context_budget(total: int | float | None, instruction_tokens: int = 0) -> ContextBudget:
    """Split ``total`` (missing or non-positive: ``DEFAULT_TOKEN_BUDGET``).

    reserved = min(total, max(ceil(15% total), 20k));
    usable = max(total - reserved - instruction_tokens, 0);
    archive = min(floor(15% usable), 8000); session = usable - archive.
    """
    budget = _effective_total(total)
    reserved = min(budget, max(math.ceil(budget * _RESERVED_SHARE), RESERVED_MIN_TOKENS))
    usable = max(budget - reserved - max(int(instruction_tokens or 0), 0), 0)
    archive = min(math.floor(usable * _ARCHIVE_SHARE), ARCHIVE_MAX_TOKENS)
    return ContextBudget(total=budget, reserved=reserved, archive=archive, session=usable - archive)
