"""End to end on the real openviking-server 0.5.2: afterTurn events -> capture ->
threshold commit -> phase 2 -> what assemble, recall and the archive tools answer.

One ``ovstream up`` serves the module; one conversation that crosses the commit
threshold on its last turn is captured once (module fixture) and every test reads
what became of it. Only public surfaces drive ovstream: publish_turn and the RPC.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from core.events import CommitOutcome
from tests.helpers.e2e import (
    KEEP_RECENT,
    RECALL_MARKER,
    SUMMARY_PREFIX,
    Conversation,
    OVSession,
    Service,
    check_crosses_at_last_turn,
    commit_rows,
    first_text,
    message_text,
    wait_for,
)

pytest_plugins = ("tests.helpers.e2e_fixtures",)

PREFERENCE = "I prefer hibiscus lemonade with a little honey in the afternoon."
ARCHIVED_WORD = "zebrawood"
GARDEN = [
    (
        "Hello! We are organising a garden party next Saturday by the lake. " + PREFERENCE,
        (
            "Noted. A lakeside garden party sounds lovely; hibiscus lemonade with honey goes on the list "
            "for the afternoon break."
        ),
    ),
    (
        (
            f"The pavilion floor is made of {ARCHIVED_WORD} planks, so guests should wear soft shoes. "
            "Please draft a short note for the invitation cards."
        ),
        (
            f"Here is a draft: Join us at the lakeside pavilion next Saturday. The floor is {ARCHIVED_WORD}, "
            "so please wear soft shoes. Tea and cake from three o'clock."
        ),
    ),
    (
        "We expect about forty guests, and the caterer needs the final headcount by Wednesday evening.",
        (
            "Understood: forty guests, final headcount to the caterer by Wednesday evening. I can send a "
            "reminder on Tuesday if that helps."
        ),
    ),
    (
        "Yes, please set the reminder for Tuesday morning and add a line about parking near the north gate.",
        (
            "Done: a reminder for Tuesday morning, and the invitation now says that parking is available "
            "near the north gate of the park."
        ),
    ),
    (
        "Great. Could you also remind the florist that the white lilies should arrive before noon on Saturday?",
        (
            "Of course: the florist will get a message today saying the white lilies must be delivered "
            "before noon on Saturday, at the pavilion entrance."
        ),
    ),
]


@dataclass
class Archived:
    conv: Conversation
    outcomes: list[CommitOutcome]


@pytest.fixture(scope="module")
def archived(e2e_service: Service, dev_ov: OVSession) -> Archived:
    """The garden conversation, published turn by turn as afterTurn does; its one
    threshold commit has a final outcome."""
    check_crosses_at_last_turn(GARDEN)
    conv = Conversation("garden")
    for user_text, assistant_text in GARDEN:
        e2e_service.publish(conv.turn(user_text, assistant_text))
    dev_ov.wait_total_messages(conv.ov_session_id, len(conv.messages))
    return Archived(conv, e2e_service.wait_commits(conv, 1))


def test_the_threshold_commit_is_recorded_completed(e2e_service: Service, archived: Archived) -> None:
    [outcome] = archived.outcomes
    assert outcome.status == "completed", outcome
    assert outcome.reason == "threshold"
    assert outcome.archived and outcome.archive_uri.endswith(f"/{archived.conv.ov_session_id}/history/archive_001")
    assert outcome.error is None
    assert outcome.memories_extracted and outcome.memories_extracted >= 1  # the stated preference

    out = e2e_service.commits_cli(archived.conv)
    assert f"session {archived.conv.ov_session_id} (agent main): 1 commit(s)" in out
    [row] = commit_rows(out)
    assert (row["COMMIT"], row["REASON"], row["STATUS"], row["ARCHIVE"]) == (
        outcome.commit_id,
        "threshold",
        "completed",
        "archive_001",
    )
    assert int(row["MEMORIES"]) == outcome.memories_extracted and row["ERROR"] == "-"


def test_the_next_main_assemble_carries_the_summary_and_the_kept_turn(e2e_service: Service, archived: Archived) -> None:
    conv = archived.conv
    answer = e2e_service.assemble(conv, main=True, tokenBudget=128_000)
    messages = answer["messages"]
    # the summary, then the turn the commit kept, word for word (the archived turns are
    # gone); the summary and the kept user message are one user message (merged users)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    blocks = [b["text"] for b in messages[0]["content"] if b.get("type") == "text"]
    assert len(blocks) == 2, blocks
    assert blocks[0].startswith(SUMMARY_PREFIX + "\n# Working Memory"), blocks[0]
    assert ARCHIVED_WORD in blocks[0]  # the summary is of the archived turns
    kept_user, kept_assistant = conv.texts()[-KEEP_RECENT:]
    assert blocks[1] == kept_user
    assert message_text(messages[1]) == kept_assistant
    guide = answer["systemPromptAddition"]
    assert "Session Context Guide" in guide and "ov_archive_search" in guide and "ov_archive_expand" in guide
    assert answer["estimatedTokens"] > 0


def test_auto_recall_injects_the_preference_in_another_session(e2e_service: Service, archived: Archived) -> None:
    assert archived.outcomes[0].status == "completed"
    later = Conversation("later")
    question = "Should I make hibiscus lemonade with honey this afternoon?"
    messages = [{"role": "user", "content": question}]

    def recalled() -> dict | None:
        # transform-context call: no prompt / availableTools keys. OV indexes a new memory
        # for search shortly after phase 2 completes, so the first calls may find nothing.
        answer = e2e_service.assemble(later, messages, main=False)
        return answer if RECALL_MARKER in first_text(answer["messages"][-1]) else None

    answer = wait_for(recalled, "auto-recall injecting the preference")
    assert len(answer["messages"]) == 1
    text = first_text(answer["messages"][-1])
    assert text.startswith("<relevant-memories>\n" + RECALL_MARKER)
    block, _, rest = text.partition("</relevant-memories>")
    assert PREFERENCE in block
    assert "<uri>viking://user/default/memories/preferences/" in block
    assert question in rest  # the user's own words follow the block
    assert answer["estimatedTokens"] > 0


def test_auto_recall_passes_a_recall_free_question_through(e2e_service: Service) -> None:
    conv = Conversation("unrelated")
    messages = [{"role": "user", "content": "ok"}]  # shorter than the recall minimum
    answer = e2e_service.assemble(conv, messages, main=False)
    assert answer["messages"] == messages


def test_archive_search_finds_a_word_of_the_archived_turns(e2e_service: Service, archived: Archived) -> None:
    result = e2e_service.tool("ov_archive_search", {"query": ARCHIVED_WORD}, conv=archived.conv)
    assert result["details"]["matchCount"] >= 1
    text = result["content"][0]["text"]
    assert "archive_001" in text and ARCHIVED_WORD in text
    missing = e2e_service.tool("ov_archive_search", {"query": "nonexistentword"}, conv=archived.conv)
    assert missing["details"]["matchCount"] == 0


def test_archive_search_counts_only_archived_messages(e2e_service: Service, archived: Archived) -> None:
    # "hibiscus" is in one archived user message and one assistant message, and also in the
    # extracted preference that the archive's memory_diff.json quotes: only messages count.
    result = e2e_service.tool("ov_archive_search", {"query": "hibiscus"}, conv=archived.conv)
    assert result["details"]["matchCount"] == 2, result["content"][0]["text"]


def test_archive_expand_returns_the_archived_messages(e2e_service: Service, archived: Archived) -> None:
    result = e2e_service.tool("ov_archive_expand", {"archiveId": "archive_001"}, conv=archived.conv)
    archived_texts = archived.conv.texts()[:-KEEP_RECENT]
    assert result["details"]["archiveId"] == "archive_001"
    assert result["details"]["messageCount"] == len(archived_texts)
    text = result["content"][0]["text"]
    for original in archived_texts:
        assert original in text
    for kept in archived.conv.texts()[-KEEP_RECENT:]:
        assert kept not in text
    assert text.index(archived_texts[0]) < text.index(archived_texts[-1])  # in conversation order
