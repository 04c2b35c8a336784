"""core.assemble_plan: the assemble decisions and building, without IO."""

from __future__ import annotations

from typing import Any

import pytest

from core.assemble_plan import (
    FullContext,
    Overlay,
    Passthrough,
    build_full_context,
    build_session_base,
    fit_overview,
    plan_overlay,
    recall_query,
    session_context_guide,
)
from core.messages.convert import INTERRUPTED_TEXT
from core.messages.model import parse_messages
from core.messages.pipeline import NO_CONTENT_TEXT
from core.messages.tokens import estimate_message_tokens, estimate_tokens
from core.ov.messages import OVMessage, TextPart, to_records
from core.recall.text import AUTO_RECALL_SOURCE_MARKER


def text_record(role: str, text: str, i: int = 0) -> OVMessage:
    return OVMessage(id=f"m{i}", role=role, parts=[TextPart(text=text)], created_at="2026-01-01T00:00:00Z")


def first_text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


def conversation(n: int, words: int = 20) -> list[OVMessage]:
    return [text_record("user" if i % 2 == 0 else "assistant", f"turn {i} " + "word " * words, i) for i in range(n)]


# --- recall_query --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "auto_recall", "expected"),
    [
        ([], True, Passthrough("latest_not_user")),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": []}],
            True,
            Passthrough("latest_not_user"),
        ),
        ([{"role": "user", "content": "what backend should we use?"}], False, Passthrough("auto_recall_disabled")),
        (
            [
                {
                    "role": "user",
                    "content": f"<relevant-memories>\n{AUTO_RECALL_SOURCE_MARKER}\n</relevant-memories>\n\nq?",
                }
            ],
            True,
            Passthrough("recall_already_injected"),
        ),
        ([{"role": "user", "content": "hey"}], True, Passthrough("recall_query_too_short")),
        ([{"role": "user", "content": "[Fri 2026-04-10 17:20 GMT+8] ok"}], True, Passthrough("recall_query_too_short")),
        ([{"role": "user", "content": "what backend should we use?"}], True, "what backend should we use?"),
        ([{"role": "user", "content": [{"type": "text", "text": "  deploy   steps  "}]}], True, "deploy steps"),
    ],
    ids=["empty", "assistant-last", "disabled", "marker", "short", "short-after-stamp", "query", "blocks"],
)
def test_recall_query(messages: list[dict[str, Any]], auto_recall: bool, expected: Any) -> None:
    assert recall_query(messages, auto_recall=auto_recall) == expected


def test_recall_query_is_cut_to_the_limit() -> None:
    query = recall_query([{"role": "user", "content": "x" * 5000}], auto_recall=True)
    assert isinstance(query, str) and len(query) == 4000


# --- plan_overlay ----------------------------------------------------------------------------

ARCHIVED = build_session_base("summary", [], conversation(2), total_archives=1)
PLAIN = build_session_base("", [], conversation(4))
EMPTY = build_session_base("", [], [])


@pytest.mark.parametrize(
    ("base", "captured", "known", "count", "expected"),
    [
        (EMPTY, 0, True, 3, Passthrough("no_ov_data")),
        (EMPTY, 0, False, 0, Passthrough("no_ov_data")),
        (PLAIN, 6, True, 6, Overlay(6)),  # caught up: nothing to append
        (PLAIN, 4, True, 6, Overlay(4)),  # two turns behind: append them
        (PLAIN, 9, True, 6, Overlay(6)),  # the caller's transcript got shorter
        (PLAIN, 0, False, 5, Passthrough("ov_msgs_fewer_than_input")),
        (PLAIN, 0, False, 4, Overlay(4)),
        (ARCHIVED, 0, False, 50, Overlay(50)),  # an archive explains the shorter OV side
    ],
    ids=[
        "empty-known",
        "empty-unknown",
        "caught-up",
        "behind",
        "shrunk",
        "unknown-fewer",
        "unknown-enough",
        "unknown-archived",
    ],
)
def test_plan_overlay(base: Any, captured: int, known: bool, count: int, expected: Any) -> None:
    assert plan_overlay(base, captured_through=captured, capture_known=known, input_count=count) == expected


def test_session_base_has_archive_from_overview_abstracts_or_count() -> None:
    assert build_session_base("x").has_archive
    assert build_session_base("", [{"archive_id": "a", "abstract": "b"}]).has_archive
    assert build_session_base("", [], [], total_archives=2).has_archive
    assert not build_session_base("  ", [], conversation(1)).has_archive


# --- build_full_context ---------------------------------------------------------------------


def build(
    records: list[Any],
    overview: str = "",
    tail: list[dict[str, Any]] | None = None,
    budget: int | None = None,
    total_archives: int = 0,
) -> FullContext:
    base = build_session_base(overview, [], to_records(records), total_archives)
    result = build_full_context(base, parse_messages(tail or []), budget)
    assert isinstance(result, FullContext)
    return result


def test_summary_message_first_and_guide_when_archived() -> None:
    result = build([text_record("assistant", "recent answer")], overview="# Summary\nEarlier work.")
    assert result.messages[0] == {"role": "user", "content": "[Session History Summary]\n# Summary\nEarlier work."}
    assert result.messages[1]["role"] == "assistant"
    guide = result.system_prompt_addition or ""
    assert "Session Context Guide" in guide and "[Session History Summary]" in guide
    assert "ov_archive_search" in guide and "ov_archive_expand" in guide


def test_archives_without_overview_get_the_tool_guide_but_no_summary() -> None:
    result = build([text_record("user", "hello")], total_archives=1)
    assert result.messages == [{"role": "user", "content": "hello"}]
    assert result.system_prompt_addition == session_context_guide(False)
    assert "ov_archive_search" in result.system_prompt_addition
    assert "[Session History Summary]" not in result.system_prompt_addition


def test_no_guide_without_archive() -> None:
    assert build([text_record("user", "hello")]).system_prompt_addition is None


def test_estimate_covers_messages_and_guide() -> None:
    result = build([text_record("user", "hello")], overview="sum")
    assert result.estimated_tokens == (
        estimate_message_tokens(result.messages) + estimate_tokens(result.system_prompt_addition or "")
    )


@pytest.mark.parametrize("budget", [25_000, 40_000, 60_000])
def test_output_fits_the_budget_and_keeps_the_newest(budget: int) -> None:
    records = conversation(500, words=60)  # ~45k tokens
    result = build(records, overview="# Summary\n" + "older detail " * 4000, budget=budget)
    assert result.estimated_tokens <= budget - 20_000  # the output reserve stays free
    assert 0 < result.session_kept < 500
    assert records[-1].text in str(result.messages[-1])
    # The summary leads (merged into the first user turn when one follows it).
    assert first_text(result.messages[0]).startswith("[Session History Summary]")


def test_a_budget_that_is_all_reserve_passes_through() -> None:
    base = build_session_base("sum", [], conversation(4))
    assert build_full_context(base, [], 4096) == Passthrough("budget_all_reserved")


def test_lag_tail_is_kept_whole_and_last() -> None:
    tail = [
        {"role": "user", "content": "new question"},
        {"role": "assistant", "content": [{"type": "text", "text": "new answer"}]},
    ]
    result = build(conversation(400, words=60), tail=tail, budget=30_000)
    assert result.tail_count == 2 and result.session_kept < 400
    assert result.messages[-2:] == [
        {"role": "user", "content": "new question"},
        {"role": "assistant", "content": [{"type": "text", "text": "new answer"}]},
    ]
    assert result.estimated_tokens <= 10_000


def test_tool_part_becomes_call_and_result() -> None:
    record = {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "I checked."},
            {"type": "context", "abstract": "User prefers concise answers."},
            {
                "type": "tool",
                "tool_id": "t1",
                "tool_name": "read_file",
                "tool_input": {"path": "a.py"},
                "tool_output": "x = 1",
                "tool_status": "completed",
            },
        ],
    }
    result = build([record], overview="sum")
    assert result.messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "I checked."},
            {"type": "text", "text": "User prefers concise answers."},
            {"type": "toolCall", "id": "t1", "name": "read_file", "arguments": {"path": "a.py"}},
        ],
    }
    assert result.messages[2] == {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "read_file",
        "content": [{"type": "text", "text": "x = 1"}],
        "isError": False,
    }


def test_running_tool_is_interrupted_not_an_error() -> None:
    record = {
        "id": "m",
        "role": "assistant",
        "parts": [
            {
                "type": "tool",
                "tool_id": "t",
                "tool_name": "bash",
                "tool_input": {"command": "npm test"},
                "tool_output": "",
                "tool_status": "running",
            }
        ],
    }
    result = build([record])
    assert result.messages[1]["isError"] is False
    assert result.messages[1]["content"][0]["text"] == INTERRUPTED_TEXT


def test_tool_part_without_id_is_text() -> None:
    record = {
        "id": "m",
        "role": "assistant",
        "parts": [
            {
                "type": "tool",
                "tool_id": "",
                "tool_name": "grep",
                "tool_input": {"pattern": "TODO"},
                "tool_output": "a.py:1 TODO",
                "tool_status": "completed",
            }
        ],
    }
    text = build([record]).messages[0]["content"][0]["text"]
    assert text.startswith("[grep] (completed)") and "a.py:1 TODO" in text


def test_tool_only_user_record_gives_no_empty_user_message() -> None:
    record = {
        "id": "m",
        "role": "user",
        "parts": [
            {
                "type": "tool",
                "tool_id": "t",
                "tool_name": "bash",
                "tool_input": {},
                "tool_output": "ok",
                "tool_status": "completed",
            }
        ],
    }
    for message in build([record], overview="sum").messages:
        assert message.get("content") not in ("", [])


def test_adjacent_assistants_get_a_placeholder_between() -> None:
    # Two assistant turns with a toolResult-free gap cannot reach a strict provider as is.
    records = [text_record("user", "q", 0), text_record("assistant", "a", 1)]
    tail = [{"role": "assistant", "content": [{"type": "text", "text": "b"}]}]
    messages = build(records, tail=tail).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == NO_CONTENT_TEXT


def test_empty_parts_still_give_the_summary() -> None:
    result = build([{"id": "e", "role": "assistant", "parts": []}], overview="Some overview", total_archives=1)
    assert first_text(result.messages[0]).startswith("[Session History Summary]")


def test_nothing_to_send_is_a_passthrough() -> None:
    base = build_session_base("", [], [OVMessage(id="e", role="assistant")])
    assert build_full_context(base, [], None) == Passthrough("assembled_empty")


# --- fit_overview ----------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [30, 100, 400])
def test_fit_overview_cuts_to_the_budget(budget: int) -> None:
    overview = "line of the summary\n" * 200
    fitted = fit_overview(overview, budget)
    assert fitted.endswith("…") and len(fitted) < len(overview)
    assert estimate_message_tokens([{"role": "user", "content": "[Session History Summary]\n" + fitted}]) <= budget


def test_fit_overview_keeps_what_fits_and_drops_what_cannot() -> None:
    assert fit_overview("short", 1000) == "short"
    assert fit_overview("anything", 0) == ""
    assert fit_overview("x" * 100, 5) == ""  # not even the header fits
