"""core.messages.convert.trim_to_budget: the longest suffix of whole units (a tool call with its
results) that fits the budget, table-driven and by property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.messages.convert import trim_to_budget
from core.messages.model import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)


def count(msgs: list[AgentMessage]) -> int:
    """One token per message: budgets read as message counts."""
    return len(msgs)


def call(call_id: str) -> AssistantMessage:
    return AssistantMessage(content=[ToolCallBlock(id=call_id, name="n")])


def result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(toolCallId=call_id, toolName="n")


u1, u2, u3 = (UserMessage(content=f"u{i}") for i in (1, 2, 3))


@pytest.mark.parametrize(
    ("msgs", "budget", "expected"),
    [
        ([u1, u2, u3], 3, [u1, u2, u3]),
        ([u1, u2, u3], 2, [u2, u3]),
        ([u1, u2, u3], 0, []),
        ([], 0, []),
        ([], -1, []),
        # The call and its two results go together, even if that undershoots the budget.
        ([u1, call("a"), result("a"), result("a2"), u2], 3, [u2]),
        ([u1, call("a"), result("a"), u2], 3, [call("a"), result("a"), u2]),
        ([result("orphan"), u1], 1, [u1]),
    ],
    ids=[
        "fits",
        "drop-oldest",
        "nothing-fits",
        "empty",
        "empty-negative-budget",
        "unit-dropped-whole",
        "unit-kept-whole",
        "leading-orphan",
    ],
)
def test_trim_to_budget(msgs: list[AgentMessage], budget: int, expected: list[AgentMessage]) -> None:
    assert trim_to_budget(msgs, budget, count) == expected


def test_trim_default_estimate_uses_the_dumped_json() -> None:
    long = UserMessage(content="x" * 4000)  # ~1000 tokens
    short = UserMessage(content="hi")
    assert trim_to_budget([long, short], 100) == [short]
    assert trim_to_budget([long, short], 5000) == [long, short]


_units = st.lists(
    st.sampled_from(["u", "a", "c"]).flatmap(
        lambda kind: (
            st.just([UserMessage(content="u")])
            if kind == "u"
            else st.just([AssistantMessage(content=[TextBlock(text="a")])])
            if kind == "a"
            else st.integers(1, 3).map(lambda k: [call("x")] + [result("x")] * k)
        )
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(_units, st.integers(0, 30))
def test_trim_gives_the_longest_fitting_suffix_of_whole_units(units: list[list[AgentMessage]], budget: int) -> None:
    msgs = [m for unit in units for m in unit]
    weight = lambda ms: sum(1 + len(getattr(m, "content", [])) for m in ms)  # noqa: E731
    out = trim_to_budget(msgs, budget, weight)
    assert out == msgs[len(msgs) - len(out) :]
    assert weight(out) <= budget or not out
    cuts = [sum(len(u) for u in units[:i]) for i in range(len(units) + 1)]
    assert len(msgs) - len(out) in cuts  # cut at a unit boundary: no call split from its results
    shorter_cuts = [c for c in cuts if c < len(msgs) - len(out)]
    assert all(weight(msgs[c:]) > budget for c in shorter_cuts)  # nothing longer would fit
