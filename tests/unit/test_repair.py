"""core.repair: what counts as a lost extraction, and when a merge could have lost one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.ov.messages import text_message
from core.repair import (
    REPAIR_BUDGET_WINDOW_S,
    is_repair_session,
    lost_extraction,
    overlapped,
    repair_budget_wait,
    repair_messages,
    repair_pool,
    repair_session_id,
)

SAID = [text_message("user", "We moved the launch to the ninth of March."), text_message("assistant", "Noted.")]


@pytest.mark.parametrize(
    ("mine", "others", "expected"),
    [
        ((100.0, 112.0), [], False),  # alone
        ((100.0, 112.0), [(105.0, 115.0)], True),  # side by side
        ((100.0, 112.0), [(120.0, None)], True),  # began within OV's 10 s batch window of my end
        ((100.0, 112.0), [(130.0, None)], False),  # began long after
        ((100.0, 112.0), [(50.0, 85.0)], False),  # ended long before
        ((100.0, 112.0), [(50.0, 95.0)], True),  # ended within the window before my start
        ((100.0, 112.0), [(50.0, None)], True),  # still running
    ],
)
def test_overlapped(mine, others, expected) -> None:
    assert overlapped(mine, others) is expected


@pytest.mark.parametrize(
    ("status", "memories", "archive", "lost"),
    [
        ("completed", 0, SAID, True),
        ("completed", 1, SAID, False),
        ("completed", None, SAID, False),  # OV said nothing of memories: nothing known lost
        ("failed", 0, SAID, False),
        ("completed", 0, [text_message("user", "hi there")], False),
        ("completed", 0, [text_message("assistant", "A long answer with many words in it.")], False),
        ("completed", 0, [text_message("user", "我喜欢喝绿茶")], True),  # CJK characters count as words
    ],
)
def test_lost_extraction(status, memories, archive, lost) -> None:
    assert lost_extraction(status, memories, archive) is lost


def test_a_repair_session_is_its_commits_own_and_holds_the_user_messages() -> None:
    sid = repair_session_id("commit_abc_1")
    assert sid == repair_session_id("commit_abc_1") != repair_session_id("commit_abc_2")
    assert is_repair_session(sid) and not is_repair_session("commit_abc_1")
    assert [m.text for m in repair_messages(SAID)] == ["We moved the launch to the ninth of March."]


NOW = 10_000.0


@pytest.mark.parametrize(
    ("started", "per_hour", "wait"),
    [
        ([], 2, 0.0),
        ([NOW - 100], 2, 0.0),  # one of two spent
        ([NOW - 100, NOW - 50], 2, 3500.0),  # both spent: until the older leaves the hour
        ([NOW - 4000, NOW - 50], 2, 0.0),  # one left the hour already
        ([NOW - 3000, NOW - 2000, NOW - 50], 2, 1600.0),  # the newest two count
        ([NOW - 50], 1, 3550.0),
        ([], 0, None),  # repairs off
        ([NOW - 50], 0, None),
    ],
)
def test_repair_budget_wait(started, per_hour, wait) -> None:
    assert repair_budget_wait(started, NOW, per_hour) == wait


@given(st.lists(st.floats(NOW - 2 * REPAIR_BUDGET_WINDOW_S, NOW), max_size=20), st.integers(1, 6))
def test_a_repair_waited_for_fits_the_budget(started, per_hour) -> None:
    wait = repair_budget_wait(started, NOW, per_hour)
    assert wait is not None and wait >= 0
    later = NOW + wait + 1e-6  # the moment it may go (past float rounding)
    assert sum(1 for t in started if t > later - REPAIR_BUDGET_WINDOW_S) < per_hour


def test_a_pool_is_the_oldest_suspects_agent_oldest_first_and_bounded() -> None:
    waiting = [("c3", "main", 30.0, 10), ("c1", "main", 10.0, 10), ("c2", "coder", 20.0, 10), ("c4", "main", 40.0, 10)]
    assert repair_pool(waiting) == ["c1", "c3", "c4"]  # one agent: the oldest suspect's
    assert repair_pool(waiting, most=2) == ["c1", "c3"]
    assert repair_pool(waiting, most_chars=25) == ["c1", "c3"]  # by what the user said
    assert repair_pool(waiting, most_chars=5) == ["c1"]  # the oldest always, however long
    assert repair_pool([]) == []
