"""core.fork: a forked subagent's base, from its parent's snapshot, the copy and its own."""

from __future__ import annotations

import pytest

from core.events import ContextSnapshot
from core.fork import copied_span, fork_base, fork_captured
from core.messages.model import UserMessage, dump_message
from core.ov.messages import text_message


def snapshot(*texts: str, captured: int = 0, overview: str = "", archives: int = 0) -> ContextSnapshot:
    return ContextSnapshot(
        ov_session_id="s",
        agent_id="main",
        messages=[text_message("user", t) for t in texts],
        captured_through=captured,
        latest_archive_overview=overview,
        total_archives=archives,
    )


@pytest.mark.parametrize(
    ("parent", "fork_at", "span"),
    [
        (None, 4, (0, 4)),  # no parent snapshot: the whole copy
        (snapshot(captured=2), 4, (2, 4)),  # the spawning turn the parent's snapshot lacks
        (snapshot(captured=4), 4, (4, 4)),  # the parent's snapshot reflects all of it
        (snapshot(captured=9), 4, (4, 4)),  # a parent snapshot past the fork adds nothing
        (snapshot(captured=-1), 4, (0, 4)),
    ],
    ids=["no-parent", "parent-behind", "parent-caught-up", "parent-ahead", "negative"],
)
def test_copied_span(parent: ContextSnapshot | None, fork_at: int, span: tuple[int, int]) -> None:
    assert copied_span(parent, fork_at) == span


@pytest.mark.parametrize(
    ("child", "fork_at", "captured"),
    [(None, 4, 4), (snapshot(captured=0), 4, 4), (snapshot(captured=6), 4, 6)],
    ids=["no-child-snapshot", "child-not-captured", "child-captured"],
)
def test_fork_captured(child: ContextSnapshot | None, fork_at: int, captured: int) -> None:
    assert fork_captured(child, fork_at) == captured


def test_the_base_is_the_parents_then_the_copy_then_the_childs() -> None:
    parent = snapshot("p0", "p1", captured=2, overview="parent summary", archives=1)
    child = snapshot("c0", captured=5, overview="child summary")
    base = fork_base(parent, [UserMessage(content="copied")], child)
    assert [dump_message(m)["content"] for m in base.messages] == ["p0", "p1", "copied", "c0"]
    assert base.overview == "parent summary\n\nchild summary"
    assert base.has_archive and base.record_count == 4
    assert base.suffix_tokens[0] > base.suffix_tokens[1] > base.suffix_tokens[-1] == 0


def test_a_fork_of_a_parent_with_nothing_is_the_copy_alone() -> None:
    base = fork_base(None, [UserMessage(content="copied")], None)
    assert [dump_message(m)["content"] for m in base.messages] == ["copied"]
    assert not base.has_archive and base.overview == "" and not base.empty
    assert fork_base(None, [], None).empty
