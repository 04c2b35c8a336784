"""core.repair: what counts as a lost extraction, and when a merge could have lost one."""

from __future__ import annotations

import pytest

from core.ov.messages import text_message
from core.repair import is_repair_session, lost_extraction, overlapped, repair_messages, repair_session_id

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
