"""The five post-processing steps: cases ported from the reference plugin's tests
(session-transcript-repair, merge-consecutive), plus properties over generated
transcripts."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from core.messages.canonical import canonicalize_agent_messages, normalize_assistant_content
from core.messages.model import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
)
from core.messages.pipeline import (
    NO_CONTENT_TEXT,
    ensure_alternation,
    merge_consecutive_users,
    run_pipeline,
    sanitize_tool_use_result_pairing,
)
from tests.helpers.transcripts import A, R, U, synthetic

# --- 1 and 2: raw dicts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            [{"role": "assistant", "content": "hi"}],
            [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}],
        ),
        ([{"role": "user", "content": "hi"}], [{"role": "user", "content": "hi"}]),
        (
            [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}],
            [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}],
        ),
        (
            ["not a dict", {"role": "assistant", "content": ""}],
            ["not a dict", {"role": "assistant", "content": [{"type": "text", "text": ""}]}],
        ),
    ],
    ids=["assistant-string", "user-untouched", "assistant-blocks-untouched", "odd-items-pass"],
)
def test_normalize_assistant_content(raw: list[Any], expected: list[Any]) -> None:
    assert normalize_assistant_content(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"role": "assistant", "content": [{"type": "toolUse", "id": "a", "name": "n", "input": {"x": 1}}]},
            [{"role": "assistant", "content": [{"type": "toolCall", "id": "a", "name": "n", "arguments": {"x": 1}}]}],
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": "a", "name": "n", "toolInput": {"x": 1}, "thoughtSignature": "s"}
                ],
            },
            [
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "toolCall",
                            "id": "a",
                            "name": "n",
                            "toolInput": {"x": 1},
                            "thoughtSignature": "s",
                            "arguments": {"x": 1},
                        }
                    ],
                }
            ],
        ),
        (
            {"role": "assistant", "content": [{"type": "functionCall", "toolCallId": "b", "name": "n"}]},
            [{"role": "assistant", "content": [{"type": "toolCall", "id": "b", "name": "n", "arguments": {}}]}],
        ),
        (
            {"role": "tool_result", "tool_use_id": "c", "content": "r"},
            [{"role": "toolResult", "tool_use_id": "c", "toolCallId": "c", "content": [{"type": "text", "text": "r"}]}],
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "d", "content": [{"type": "text", "text": "r"}]}],
            },
            [{"role": "toolResult", "toolCallId": "d", "content": [{"type": "text", "text": "r"}], "isError": False}],
        ),
    ],
    ids=["toolUse", "toolCall-toolInput", "functionCall-no-args", "tool_result-role", "user-only-tool-results"],
)
def test_canonicalize_agent_messages(raw: dict[str, Any], expected: list[Any]) -> None:
    snapshot = repr(raw)
    assert canonicalize_agent_messages([raw]) == expected
    assert repr(raw) == snapshot  # pure: the input dict is not touched


# --- 3: pairing (reference: session-transcript-repair.test.ts) -------------------------------

PAIRING_CASES: list[tuple[str, list[AgentMessage], list[AgentMessage]]] = [
    (
        "paired call and result untouched",
        [A("tc1", text="Let me search"), R("tc1")],
        [A("tc1", text="Let me search"), R("tc1")],
    ),
    (
        "a call without result gets a synthetic error result before the next user",
        [A("tc_orphan"), U("continue")],
        [A("tc_orphan"), synthetic("tc_orphan"), U("continue")],
    ),
    ("results of several calls in call order", [A("a", "b"), R("b"), R("a")], [A("a", "b"), R("a"), R("b")]),
    ("orphan result without any call dropped", [U("hi"), R("orphan_id"), U("continue")], [U("hi"), U("continue")]),
    (
        "stale duplicate of an earlier span dropped, each id once",
        [A("tc_x"), R("tc_x", "result 1"), A("tc_y"), R("tc_x", "stale"), R("tc_y", "content a")],
        [A("tc_x"), R("tc_x", "result 1"), A("tc_y"), R("tc_y", "content a")],
    ),
    (
        "errored assistant gets no synthetic result",
        [A("err_tc", stop="error"), U("try again")],
        [A("err_tc", stop="error"), U("try again")],
    ),
    (
        "aborted assistant loses its results but keeps the users after it",
        [A("ab", stop="aborted"), R("ab"), U("next")],
        [A("ab", stop="aborted"), U("next")],
    ),
    (
        "synthetic result of a nameless call is named unknown",
        [A("tc_without_name", names={"tc_without_name": ""})],
        [A("tc_without_name", names={"tc_without_name": ""}), synthetic("tc_without_name", "unknown")],
    ),
    ("result displaced after a user moves up", [A("x"), U("meanwhile"), R("x")], [A("x"), R("x"), U("meanwhile")]),
    (
        "a result after the next assistant is an orphan; the call gets a synthetic one",
        [A("x"), A(text="later"), R("x")],
        [A("x"), synthetic("x"), A(text="later")],
    ),
    (
        "a second result for the same id in one span dropped",
        [A("x"), R("x", "first"), R("x", "second")],
        [A("x"), R("x", "first")],
    ),
    (
        "a blank result name takes the call's name",
        [A("x", names={"x": "grep"}), R("x", name=" ")],
        [A("x", names={"x": "grep"}), R("x", name="grep")],
    ),
    ("a repeated id in one assistant gets one result", [A("x", "x"), R("x")], [A("x", "x"), R("x")]),
    ("assistant without calls drops following results", [A(text="t"), R("x"), U()], [A(text="t"), U()]),
]


@pytest.mark.parametrize(("msgs", "expected"), [c[1:] for c in PAIRING_CASES], ids=[c[0] for c in PAIRING_CASES])
def test_sanitize_tool_use_result_pairing(msgs: list[AgentMessage], expected: list[AgentMessage]) -> None:
    assert sanitize_tool_use_result_pairing(msgs) == expected


def test_synthetic_result_wording_and_timestamp() -> None:
    assistant = AssistantMessage(content=[ToolCallBlock(id="t", name="bash")], timestamp=1234)
    [_, result] = sanitize_tool_use_result_pairing([assistant])
    assert isinstance(result, ToolResultMessage)
    assert "missing tool result" in result.content[0].text
    assert (result.isError, result.toolName, result.timestamp) == (True, "bash", 1234)


# --- 4: merge users (reference: context-engine-merge-consecutive.test.ts) -----------------------

MERGE_CASES: list[tuple[str, list[AgentMessage], list[AgentMessage]]] = [
    (
        "two users merge, strings become text blocks",
        [U("[Session History Summary]\nold archive"), U("Hello, what's up?"), A(text="Hi!")],
        [
            U([TextBlock(text="[Session History Summary]\nold archive"), TextBlock(text="Hello, what's up?")]),
            A(text="Hi!"),
        ],
    ),
    (
        "four users collapse into one",
        [U("a"), U("b"), U("c"), U("d"), A(text="ok")],
        [U([TextBlock(text=t) for t in "abcd"]), A(text="ok")],
    ),
    (
        "alternation untouched",
        [U("Q1"), A(text="A1"), U("Q2"), A(text="A2")],
        [U("Q1"), A(text="A1"), U("Q2"), A(text="A2")],
    ),
    (
        "block contents concatenate in order",
        [U([TextBlock(text="part 1")]), U([TextBlock(text="part 2")])],
        [U([TextBlock(text="part 1"), TextBlock(text="part 2")])],
    ),
    (
        "string then blocks",
        [U("first message as string"), U([TextBlock(text="second as array")])],
        [U([TextBlock(text="first message as string"), TextBlock(text="second as array")])],
    ),
    ("empty input", [], []),
    ("single message stays a string", [U("alone")], [U("alone")]),
    ("a toolResult between users keeps them apart", [U("a"), R("x"), U("b")], [U("a"), R("x"), U("b")]),
]


@pytest.mark.parametrize(("msgs", "expected"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_merge_consecutive_users(msgs: list[AgentMessage], expected: list[AgentMessage]) -> None:
    assert merge_consecutive_users(msgs) == expected


def test_merge_keeps_first_timestamp_and_leaves_input_alone() -> None:
    first, second = UserMessage(content="a", timestamp=1), UserMessage(content="b", timestamp=2)
    msgs = [first, second]
    assert merge_consecutive_users(msgs)[0].timestamp == 1
    assert msgs == [first, second] and first.content == "a"


def test_anthropic_tool_results_end_up_ahead_of_user_text() -> None:
    # The reference hoists tool_result blocks to the front when merging users;
    # here they become toolResult messages right after their call.
    raw = [
        {
            "role": "assistant",
            "content": [
                {"type": "toolUse", "id": "tu_a", "name": "n", "input": {}},
                {"type": "toolUse", "id": "tu_b", "name": "n", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_a", "content": "a"},
                {"type": "text", "text": "between"},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_b", "content": "b"}]},
    ]
    out = dump_messages(run_pipeline(raw))
    assert [(m["role"], m.get("toolCallId")) for m in out] == [
        ("assistant", None),
        ("toolResult", "tu_a"),
        ("toolResult", "tu_b"),
        ("user", None),
    ]
    assert out[3]["content"] == [{"type": "text", "text": "between"}]


# --- 5: alternation -------------------------------------------------------------------------

PLACEHOLDER = UserMessage(content=NO_CONTENT_TEXT)


@pytest.mark.parametrize(
    ("msgs", "expected"),
    [
        ([U("Q1"), A(text="A1"), U("Q2"), A(text="A2")], [U("Q1"), A(text="A1"), U("Q2"), A(text="A2")]),
        ([U("Q"), A(text="A1"), A(text="A2")], [U("Q"), A(text="A1"), PLACEHOLDER, A(text="A2")]),
        ([U("U1"), U("U2"), A(text="A")], [U("U1"), U("U2"), A(text="A")]),
        ([], []),
        ([A(text="alone")], [A(text="alone")]),
        (
            [U("Q"), A(text="1"), A(text="2"), A(text="3")],
            [U("Q"), A(text="1"), PLACEHOLDER, A(text="2"), PLACEHOLDER, A(text="3")],
        ),
        ([A("x"), R("x"), A(text="after")], [A("x"), R("x"), A(text="after")]),
    ],
    ids=[
        "alternating",
        "two-assistants",
        "users-not-touched",
        "empty",
        "single",
        "three-assistants",
        "tool-result-separates",
    ],
)
def test_ensure_alternation(msgs: list[AgentMessage], expected: list[AgentMessage]) -> None:
    assert ensure_alternation(msgs) == expected


def test_issue_1724_stack_collapses_to_nine_alternating_turns() -> None:
    assembled = [
        U("[Session History Summary]\n# Working Memory\n..."),
        A(text="previous response"),
        U("got it"),
        A(text="anything else?"),
        U("write iterative version"),
        A(text="ok working on it..."),
        U("[sessions_yield interrupt]"),
        U("Turn yielded. [Context: previous turn ...]"),
        A(text="I have resumed, continuing..."),
        U("good"),
        U("[Audio] User text: [Telegram User] wrap it in a class"),
        U("also add comments"),
    ]
    final = run_pipeline(assembled)
    assert len(final) == 9
    assert all(type(a) is not type(b) for a, b in itertools.pairwise(final))
    assert isinstance(final[0], UserMessage) and isinstance(final[-1], UserMessage)


def test_compact_path_summary_and_new_user_become_one() -> None:
    final = run_pipeline([U("[Session History Summary]\n..."), U("what was the last thing we did?")])
    assert len(final) == 1 and isinstance(final[0], UserMessage)


def test_run_pipeline_accepts_raw_dicts() -> None:
    raw = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_call", "id": "c", "name": "ls", "arguments": "{}"}]},
        {"role": "assistant", "content": "done"},
    ]
    assert run_pipeline(raw) == [U("q"), A("c", names={"c": "ls"}), synthetic("c", "ls"), A(text="done")]
