"""End to end on the real openviking-server 0.5.2: two sessions of one user commit at once.

OV 0.5.2 runs phase 2 of different sessions concurrently, and when two of one
user's memory extractions overlap, neither writes its memories: both tasks
complete with ``memories_extracted: {}`` (probed directly on OV: three sessions
committed together extracted nothing; the same commits one after the other
extracted one memory each). So a user with two busy sessions silently loses what
they said unless ovstream keeps one user's phase 2s from overlapping.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.e2e import Conversation, OVSession, Service, check_crosses_at_last_turn

pytest_plugins = ("tests.helpers.e2e_fixtures",)


@pytest.fixture(scope="module")
def e2e_settings() -> dict[str, Any]:
    # its own OV user (dev-mode header): the memories this writes stay out of other tests' searches
    return {"user": "concurrency"}


def _turns(preference: str, topic: str) -> list[tuple[str, str]]:
    filler = (
        f"Let us plan the {topic} properly this time, with a list of tasks, owners and dates, so "
        "that nothing is forgotten and everybody knows what to do next."
    )
    return [
        (f"Hello again. {preference}", f"Noted for the {topic}: {preference.lower()}"),
        (filler, f"Agreed. I will draft the {topic} task list with owners and dates for each item."),
        (
            f"The {topic} starts on the twelfth, and the budget must be approved by the ninth.",
            f"The {topic} starts on the twelfth; budget approval is due on the ninth.",
        ),
        (
            f"Please send the {topic} summary to the whole group on Friday afternoon.",
            f"The {topic} summary goes to the whole group on Friday afternoon.",
        ),
        (
            f"Also book the meeting room for the {topic} kickoff on Monday at ten.",
            f"Meeting room booked for the {topic} kickoff on Monday at ten o'clock.",
        ),
        (
            (
                f"Finally, ask everyone to confirm their attendance for the {topic} kickoff by Thursday evening, "
                "and remind them to bring their calendars and any questions about the schedule. "
                "Thank you very much for the help!"
            ),
            (
                f"I will ask everyone to confirm attendance for the {topic} kickoff by Thursday evening at the "
                "latest, and remind them to bring calendars and questions about the schedule."
            ),
        ),
    ]


def test_two_sessions_of_one_user_committing_together_keep_both_memories(
    e2e_service: Service, dev_ov: OVSession
) -> None:
    a_turns = _turns("I prefer oolong tea served in small clay cups.", "harvest festival")
    b_turns = _turns("I prefer fountain pens with dark blue ink.", "library fair")
    check_crosses_at_last_turn(a_turns)
    check_crosses_at_last_turn(b_turns)
    a, b = Conversation("together-a"), Conversation("together-b")
    for (au, aa), (bu, ba) in zip(a_turns, b_turns):  # both users' turns arrive interleaved
        e2e_service.publish(a.turn(au, aa))
        e2e_service.publish(b.turn(bu, ba))
    [a_outcome] = e2e_service.wait_commits(a, 1)
    [b_outcome] = e2e_service.wait_commits(b, 1)
    assert (a_outcome.status, b_outcome.status) == ("completed", "completed")
    assert (a_outcome.memories_extracted or 0) >= 1 and (b_outcome.memories_extracted or 0) >= 1, (a_outcome, b_outcome)
