"""core.messages.pipeline: invariants of the five steps over generated transcripts (hypothesis)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.messages.model import (
    AgentMessage,
    AssistantMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    dump_messages,
)
from core.messages.pipeline import (
    run_pipeline,
)

# --- properties -------------------------------------------------------------------------------

_texts = st.text(alphabet="ab (", max_size=4)


@st.composite
def transcripts(draw: st.DrawFn) -> list[AgentMessage]:
    """Messages in any order; call ids unique per assistant position, results pointing
    at past, future, or no calls; some assistants errored."""
    msgs: list[AgentMessage] = []
    for i in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "toolResult"]))
        if kind == "user":
            content = draw(_texts | st.lists(_texts.map(lambda t: TextBlock(text=t)), max_size=2))
            msgs.append(UserMessage(content=content))
        elif kind == "assistant":
            blocks: list[Any] = [TextBlock(text=t) for t in draw(st.lists(_texts, max_size=1))]
            blocks += [ThinkingBlock(thinking="t")] * draw(st.integers(0, 1))
            names = draw(st.lists(st.sampled_from(["", "bash", "read"]), max_size=3))
            blocks += [ToolCallBlock(id=f"c{i}_{j}", name=n) for j, n in enumerate(names)]
            stop = draw(st.sampled_from([None, "stop", "toolUse", "error", "aborted"]))
            msgs.append(AssistantMessage(content=blocks, stopReason=stop))
        else:
            call_id = draw(
                st.sampled_from(["ghost"]) | st.builds("c{}_{}".format, st.integers(0, 12), st.integers(0, 2))
            )
            msgs.append(
                ToolResultMessage(
                    toolCallId=call_id,
                    toolName=draw(st.sampled_from(["", "bash"])),
                    content=[TextBlock(text=draw(_texts))],
                )
            )
    return msgs


def _errored(msg: AgentMessage) -> bool:
    return isinstance(msg, AssistantMessage) and msg.stopReason in ("error", "aborted")


def _call_ids(msg: AgentMessage) -> list[str]:
    if not isinstance(msg, AssistantMessage):
        return []
    return [b.id for b in msg.content if isinstance(b, ToolCallBlock)]


def _user_texts(msgs: list[AgentMessage]) -> Counter[str]:
    texts: Counter[str] = Counter()
    for msg in msgs:
        if isinstance(msg, UserMessage):
            if isinstance(msg.content, str):
                texts[msg.content] += 1
            else:
                texts.update(b.text for b in msg.content if isinstance(b, TextBlock))
    return texts


@settings(max_examples=400, deadline=None)
@given(transcripts())
def test_pipeline_invariants(msgs: list[AgentMessage]) -> None:
    out = run_pipeline(msgs)
    for prev, cur in itertools.pairwise(out):
        # Roles alternate: never two assistants, never two users, in a row.
        assert not (isinstance(prev, AssistantMessage) and isinstance(cur, AssistantMessage))
        assert not (isinstance(prev, UserMessage) and isinstance(cur, UserMessage))
    owner: AgentMessage | None = None  # the assistant whose results may follow
    for i, msg in enumerate(out):
        if isinstance(msg, ToolResultMessage):
            # A result only right after its own (non-errored) assistant call, or another result.
            assert i > 0 and isinstance(out[i - 1], (AssistantMessage, ToolResultMessage))
            assert owner is not None and not _errored(owner)
            assert msg.toolCallId in _call_ids(owner)
        elif isinstance(msg, AssistantMessage):
            owner = msg
            if not _errored(msg):
                run = []
                for nxt in out[i + 1 :]:
                    if not isinstance(nxt, ToolResultMessage):
                        break
                    run.append(nxt.toolCallId)
                # Every call answered exactly once, in call order.
                assert run == list(dict.fromkeys(_call_ids(msg)))
        else:
            owner = None
    assert not _user_texts(msgs) - _user_texts(out)  # no user text lost


@settings(max_examples=300, deadline=None)
@given(transcripts())
def test_pipeline_is_idempotent(msgs: list[AgentMessage]) -> None:
    once = run_pipeline(msgs)
    assert run_pipeline(once) == once


@settings(max_examples=200, deadline=None)
@given(transcripts())
def test_raw_and_typed_input_agree(msgs: list[AgentMessage]) -> None:
    assert run_pipeline(dump_messages(msgs)) == run_pipeline(msgs)
