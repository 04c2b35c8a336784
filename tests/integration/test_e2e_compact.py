"""End to end on the real openviking-server 0.5.2: compact after a threshold commit.

A conversation without anything to remember (phase 2 writes no memory, so it is
quick) crosses the commit threshold on its sixth turn (archive_001); one more turn
is captured, then ``POST /v1/compact`` commits everything (archive_002) and answers
the seed's CompactResult.
"""

from __future__ import annotations

import pytest

from core.messages.tokens import estimate_message_tokens
from tests.helpers.e2e import (
    SUMMARY_PREFIX,
    Conversation,
    OVSession,
    Service,
    check_crosses_at_last_turn,
    commit_rows,
    first_text,
)

pytest_plugins = ("tests.helpers.e2e_fixtures",)

MOVING = [
    (
        "Please list the boxes for the office move: monitors, cables, the small printer and two desk lamps.",
        (
            "Box list: monitors in box one, cables in box two, the small printer in box three, and both desk "
            "lamps in box four."
        ),
    ),
    (
        (
            "The movers arrive on Thursday at eight o'clock, and the new office is on the fifth floor of the "
            "harbour building."
        ),
        ("Thursday at eight, fifth floor of the harbour building. The lift there is large enough for the printer box."),
    ),
    (
        "Label box three as fragile and put the spare toner cartridges in it as well.",
        "Box three is now labelled fragile and holds the small printer plus the spare toner cartridges.",
    ),
    (
        "Add the whiteboard markers and the coffee mugs to box two, next to the cables.",
        "Box two now holds the cables, the whiteboard markers and the coffee mugs; box four still has the lamps.",
    ),
    (
        (
            "The old office keys go back to the landlord on Friday afternoon, after the cleaners have finished "
            "the rooms."
        ),
        (
            "Friday afternoon, after the cleaning: the old office keys go back to the landlord. I will add it "
            "to the moving checklist."
        ),
    ),
    (
        (
            "Finally, the internet provider installs the new line on Monday morning, so the team starts working "
            "there on Monday afternoon."
        ),
        (
            "Monday morning the line is installed and the team starts on Monday afternoon. The checklist now "
            "covers every day of the move."
        ),
    ),
]
AFTER_COMMIT = (
    "One more thing: the plants travel in the car, not in the van.",
    "Noted: the plants go in the car with the team, not in the van.",
)


@pytest.fixture(scope="module")
def compacted(e2e_service: Service, dev_ov: OVSession) -> tuple[Conversation, dict, dict]:
    """(conversation, compact's answer, OV /context right after it)."""
    check_crosses_at_last_turn(MOVING)
    conv = Conversation("moving")
    for user_text, assistant_text in MOVING:
        e2e_service.publish(conv.turn(user_text, assistant_text))
    [first] = e2e_service.wait_commits(conv, 1)
    assert first.status == "completed" and first.archive_uri.endswith("/archive_001"), first
    e2e_service.publish(conv.turn(*AFTER_COMMIT))
    dev_ov.wait_total_messages(conv.ov_session_id, len(conv.messages))
    answer = e2e_service.post(
        "/v1/compact", {**conv.ref, "tokenBudget": 128_000, "currentTokenCount": estimate_message_tokens(conv.messages)}
    )
    return conv, answer, dev_ov.context(conv.ov_session_id)


def test_compact_answers_the_seeds_compact_result(
    e2e_service: Service, compacted: tuple[Conversation, dict, dict]
) -> None:
    conv, answer, context = compacted
    assert (answer["ok"], answer["compacted"], answer["reason"]) == (True, True, "commit_completed"), answer
    result = answer["result"]
    assert result["firstKeptEntryId"] == "archive_002"  # last segment of the new archive's URI
    # before: what assemble sent before the commit (archive 1's summary, the guide, the turn
    # since); the host's own count comes back beside it
    assert result["details"]["hostTokensBefore"] == estimate_message_tokens(conv.messages)
    assert result["tokensBefore"] > 0
    # after: what assemble sends now (everything archived: the summary and the guide only);
    # prompt null: the session's context without a turn's recalled memories
    assert context["messages"] == [] and context["stats"]["totalArchives"] == 2
    assembled = e2e_service.post(
        "/v1/assemble", {**conv.ref, "messages": conv.messages, "prompt": None, "tokenBudget": 128_000}
    )
    assert result["tokensAfter"] == assembled["estimatedTokens"] > 0
    assert result["summary"] == context["latest_archive_overview"].strip()
    assert result["summary"].startswith("# Working Memory")
    assert "plants" in result["summary"]  # the turn captured after the first commit is in it


def test_both_commits_are_recorded(e2e_service: Service, compacted: tuple[Conversation, dict, dict]) -> None:
    conv = compacted[0]
    outcomes = e2e_service.commits(conv)
    assert [(o.reason, o.status) for o in outcomes] == [("threshold", "completed"), ("compact", "completed")]
    assert [o.archive_uri.rsplit("/", 1)[-1] for o in outcomes] == ["archive_001", "archive_002"]
    rows = commit_rows(e2e_service.commits_cli(conv))
    assert [(r["REASON"], r["STATUS"], r["ARCHIVE"]) for r in rows] == [
        ("threshold", "completed", "archive_001"),
        ("compact", "completed", "archive_002"),
    ]


def test_the_main_assemble_after_compact_is_the_summary(
    e2e_service: Service, compacted: tuple[Conversation, dict, dict]
) -> None:
    conv, answer, _ = compacted
    assembled = e2e_service.assemble(conv, main=True, tokenBudget=128_000)
    [summary] = assembled["messages"]
    assert first_text(summary) == SUMMARY_PREFIX + "\n" + answer["result"]["summary"]
    assert "Session Context Guide" in assembled["systemPromptAddition"]


def test_compact_of_an_unknown_session(e2e_service: Service) -> None:
    answer = e2e_service.post("/v1/compact", Conversation("never-captured").ref)
    assert answer == {"ok": True, "compacted": False, "reason": "session_not_found"}
