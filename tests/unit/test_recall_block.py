"""core.recall.hits: the injected block and prepending it."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.recall.hits import (
    build_recall_block,
    format_recall_line,
    prepend_recall_block,
)
from core.recall.text import AUTO_RECALL_SOURCE_MARKER
from tests.helpers.recall import MEM, hit

# --- the block -----------------------------------------------------------------------

PREF = hit("preferences/tea.md", 0.8, abstract="likes tea")
EVENT = hit("events/trip.md", 0.7, abstract="trip")
HEADER = f"<relevant-memories>\n{AUTO_RECALL_SOURCE_MARKER}\nThe following OpenViking memories may be relevant:\n"
PREF_LINE = f"- [preferences]\n  <uri>{MEM}/preferences/tea.md</uri>\n  User likes green tea."
EVENT_LINE = f"- [events]\n  <uri>{MEM}/events/trip.md</uri>\n  Went to Kyoto."


@pytest.mark.parametrize(
    ("raw", "content", "expected"),
    [
        (PREF, "User likes green tea.", PREF_LINE),
        (PREF, "  User likes green tea.\n", PREF_LINE),
        (PREF, "line one\nline two", f"- [preferences]\n  <uri>{MEM}/preferences/tea.md</uri>\n  line one\n  line two"),
        (PREF, "   ", f"- [preferences]\n  <uri>{MEM}/preferences/tea.md</uri>\n  likes tea"),
        (hit("x.md", 0.5, abstract=""), "", f"- [memory]\n  <uri>{MEM}/x.md</uri>\n  {MEM}/x.md"),
    ],
)
def test_format_recall_line(raw: dict, content: str, expected: str) -> None:
    assert format_recall_line(raw, content) == expected


@pytest.mark.parametrize(
    ("items", "max_chars", "expected"),
    [
        ([], 4000, None),
        ([(PREF, "User likes green tea.")], 4000, f"{HEADER}{PREF_LINE}\n</relevant-memories>"),
        (
            [(PREF, "User likes green tea."), (EVENT, "Went to Kyoto.")],
            4000,
            f"{HEADER}{PREF_LINE}\n{EVENT_LINE}\n</relevant-memories>",
        ),
        # exactly fits: both lines plus one separator
        (
            [(PREF, "User likes green tea."), (EVENT, "Went to Kyoto.")],
            len(PREF_LINE) + 1 + len(EVENT_LINE),
            f"{HEADER}{PREF_LINE}\n{EVENT_LINE}\n</relevant-memories>",
        ),
        # one char short: the second line is skipped whole, not cut
        (
            [(PREF, "User likes green tea."), (EVENT, "Went to Kyoto.")],
            len(PREF_LINE) + len(EVENT_LINE),
            f"{HEADER}{PREF_LINE}\n</relevant-memories>",
        ),
        # a line too long is skipped and a later one that fits still goes in
        (
            [(PREF, "x" * 5000), (EVENT, "Went to Kyoto.")],
            200,
            f"{HEADER}{EVENT_LINE}\n</relevant-memories>",
        ),
        # nothing fits
        ([(PREF, "x" * 5000)], 200, None),
        ([(PREF, "User likes green tea.")], 0, None),
    ],
)
def test_build_recall_block(items: list, max_chars: int, expected: str | None) -> None:
    assert build_recall_block(items, max_chars) == expected


@given(st.lists(st.text(max_size=300), max_size=10), st.integers(0, 2000))
def test_build_recall_block_respects_the_budget(contents: list[str], max_chars: int) -> None:
    items = [(hit(f"m{i}.md", 0.5), c) for i, c in enumerate(contents)]
    block = build_recall_block(items, max_chars)
    if block is None:
        return
    body = block.removeprefix(HEADER).removesuffix("\n</relevant-memories>")
    assert block.startswith(HEADER) and block.endswith("\n</relevant-memories>")
    assert len(body) <= max_chars


# --- prepending ----------------------------------------------------------------------

B = "<relevant-memories>\nSource: openviking-auto-recall\nx\n</relevant-memories>"


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "hi"}], [{"role": "user", "content": f"{B}\n\nhi"}]),
        (
            [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "d"}]}],
            [{"role": "user", "content": [{"type": "text", "text": f"{B}\n\nhi"}, {"type": "image", "data": "d"}]}],
        ),
        (
            [{"role": "user", "content": [{"type": "image", "data": "d"}, {"type": "text", "text": "hi"}]}],
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": B},
                        {"type": "image", "data": "d"},
                        {"type": "text", "text": "hi"},
                    ],
                }
            ],
        ),
        ([{"role": "user", "content": []}], [{"role": "user", "content": [{"type": "text", "text": B}]}]),
        ([{"role": "user"}], [{"role": "user", "content": B}]),
        # other keys of the message and block survive
        (
            [{"role": "user", "content": [{"type": "text", "text": "hi", "cache": 1}], "timestamp": 5}],
            [{"role": "user", "content": [{"type": "text", "text": f"{B}\n\nhi", "cache": 1}], "timestamp": 5}],
        ),
        # the latest user message, not an earlier one
        (
            [
                {"role": "user", "content": "old"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "new"},
            ],
            [
                {"role": "user", "content": "old"},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": f"{B}\n\nnew"},
            ],
        ),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            [{"role": "user", "content": f"{B}\n\nq"}, {"role": "assistant", "content": "a"}],
        ),
        # no user message, or one already injected into: unchanged
        ([{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "a"}]),
        ([], []),
        ([{"role": "user", "content": f"{B}\n\nq"}], [{"role": "user", "content": f"{B}\n\nq"}]),
    ],
)
def test_prepend_recall_block(messages: list[dict], expected: list[dict]) -> None:
    before = copy.deepcopy(messages)
    result = prepend_recall_block(messages, B)
    assert result == expected
    assert messages == before  # input untouched
    assert result is not messages
