"""core.recall.text: marker, block stripping, query preparation, capture sanitising."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.recall.text import (
    AUTO_RECALL_SOURCE_MARKER,
    has_recall_marker,
    latest_user_index,
    message_text,
    prepare_recall_query,
    sanitize_capture_text,
    strip_recall_blocks,
)

BLOCK = (
    "<relevant-memories>\nSource: openviking-auto-recall\n"
    "The following OpenViking memories may be relevant:\n- [preferences]\n  x\n</relevant-memories>"
)


def test_marker_text() -> None:
    assert AUTO_RECALL_SOURCE_MARKER == "Source: openviking-auto-recall"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("no blocks here", "no blocks here"),
        ("  keeps  inner   spacing\n\nand lines  ", "  keeps  inner   spacing\n\nand lines  "),
        (BLOCK + "\n\nwhat do I like?", "what do I like?"),
        ("hello <relevant-memories>x</relevant-memories> world", "hello  world"),
        ("a <RELEVANT-MEMORIES>x</Relevant-Memories> b", "a  b"),
        ("<relevant-memories>one</relevant-memories>mid<relevant-memories>two</relevant-memories>", "mid"),
        ("<relevant-memories>multi\nline\nblock</relevant-memories>\nq", "q"),
        # an opening tag that never closes runs to the end
        ("question first <relevant-memories>cut off here", "question first"),
        ("<relevant-memories>x</relevant-memories> q <relevant-memories>dangling", "q"),
        ('<openviking-context source="x">ctx</openviking-context>\nq', "q"),
        ("<openviking-context>a</openviking-context> q <relevant-memories>b</relevant-memories>", "q"),
        ("<OPENVIKING-CONTEXT>a</openviking-context>q", "q"),
        # lookalike tags are left alone
        ("<openviking-contextual>a</openviking-contextual>", "<openviking-contextual>a</openviking-contextual>"),
        ("a </relevant-memories> b", "a </relevant-memories> b"),
    ],
)
def test_strip_recall_blocks(text: str, expected: str) -> None:
    assert strip_recall_blocks(text) == expected


SENDER = 'Sender (untrusted metadata): ```json\n{"session":"x"}\n```'
CONVERSATION = 'Conversation info (untrusted metadata): ```json\n{"channel":"telegram"}\n```'
METADATA_FENCE = '```json\n{"session":"s1","userId":"u1","agentId":"a1","channel":"ch"}\n```'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("   ", ""),
        ("hello    world\n\n\tthere", "hello world there"),
        # injected blocks
        ("hello <relevant-memories>some injected context</relevant-memories> world", "hello world"),
        ("<relevant-memories>only memory</relevant-memories>", ""),
        ("hello<relevant-memories>x</relevant-memories>world", "hello world"),
        ("keep <relevant-memories>unterminated", "keep"),
        ('<openviking-context kind="a">x</openviking-context> real', "real"),
        # host metadata fences
        (f"hello {SENDER} world", "hello world"),
        (f"{CONVERSATION}\nwhat now", "what now"),
        ('Conversation metadata: ```\n{"a":1}\n```\nq', "q"),
        ("intro\n会话信息 (meta): ```json\n{}\n```\nq", "intro q"),
        ("对话信息: ```x```rest", "rest"),
        # JSON fences: dropped only with >= 3 distinct metadata keys
        (f"prefix {METADATA_FENCE} suffix", "prefix suffix"),
        ('```json\n{"sessionKey":"k","timezone":"UTC","TIMESTAMP":1}\n```tail', "tail"),
        (
            '```json\n{"session":"a","session":"b","channel":"c"}\n```',
            '```json {"session":"a","session":"b","channel":"c"} ```',
        ),
        ('```json\n{"name":"Alice","age":30}\n```', '```json {"name":"Alice","age":30} ```'),
        ('```json\n{"session":"s","userId":"u"}\n```', '```json {"session":"s","userId":"u"} ```'),
        # leading timestamps
        ("[Fri 2026-04-10 17:20 GMT+8] actual content", "actual content"),
        ("[2026-03-29T10:00:00Z] actual content here", "actual content here"),
        ("  [Monday 2026/04/10] hi", "hi"),
        ("[10-04-2026 09:05:01.123+08:00] hi", "hi"),
        ("[2026-04-10 17:20 UTC] hi", "hi"),
        ("[2026-04-10]hi", "hi"),
        ("text [2026-04-10 17:20] in the middle", "text [2026-04-10 17:20] in the middle"),
        ("[[2026-04-10]] wiki link", "[[2026-04-10]] wiki link"),
        ("[note] not a stamp", "[note] not a stamp"),
        ("[Fri 2026-04-10 17:20 GMT+8] [2026-04-11] only the first", "[2026-04-11] only the first"),
        # subagent prefix, also behind a timestamp
        ("[Subagent Context] some context data here", "some context data here"),
        ("[subagent context]x", "x"),
        ("[2026-04-10 17:20] [Subagent Context] task", "task"),
        ("mid [Subagent Context] stays", "mid [Subagent Context] stays"),
        # NULs
        ("nul\x00byte", "nulbyte"),
        # bare tool placeholders
        ("[tool: read_file]", ""),
        ("  [toolUse: grep]  ", ""),
        ("[TOOL:bash]", ""),
        ("[tool: read_file] and then text", "[tool: read_file] and then text"),
        ("[tool]", "[tool]"),
        # all at once
        (
            f"[Fri 2026-04-10 17:20 GMT+8] {BLOCK}\n{SENDER}\nI prefer   dark\x00 mode",
            "I prefer dark mode",
        ),
    ],
)
def test_sanitize_capture_text(text: str, expected: str) -> None:
    assert sanitize_capture_text(text) == expected


@given(st.text())
def test_sanitize_capture_text_is_normalised(text: str) -> None:
    result = sanitize_capture_text(text)
    assert result == result.strip()
    assert "\x00" not in result
    assert "  " not in result and "\n" not in result and "\t" not in result


no_tags = st.text(alphabet=st.characters(exclude_characters="<>`[\x00"))


@given(no_tags, no_tags, no_tags)
def test_sanitize_drops_the_block_and_keeps_the_words(before: str, inside: str, after: str) -> None:
    text = f"{before}<relevant-memories>{inside}</relevant-memories>{after}"
    assert sanitize_capture_text(text) == " ".join(f"{before} {after}".split())


@given(no_tags, no_tags)
def test_strip_recall_blocks_keeps_the_rest(before: str, inside: str) -> None:
    assert strip_recall_blocks(f"{before}<relevant-memories>{inside}") == before.strip()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("  what   do I\nlike? ", "what do I like?"),
        (BLOCK + "\n\nwhat do I like?", "what do I like?"),
        (f"[Fri 2026-04-10 17:20 GMT+8] {SENDER} where do I live", "where do I live"),
        ("<relevant-memories>only</relevant-memories>", ""),
    ],
)
def test_prepare_recall_query(text: str, expected: str) -> None:
    assert prepare_recall_query(text) == expected


def test_prepare_recall_query_cuts_to_4000_chars() -> None:
    assert prepare_recall_query("a" * 5000) == "a" * 4000
    assert len(prepare_recall_query("word " * 2000)) <= 4000
    # the cut is trimmed again: no trailing space at the boundary
    assert prepare_recall_query("a" * 3999 + " bcd") == "a" * 3999


def test_prepare_recall_query_custom_limit() -> None:
    assert prepare_recall_query("abcdef", max_chars=3) == "abc"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": "plain"}, "plain"),
        (
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}],
            },
            "a\nb",
        ),
        ({"role": "user", "content": [{"type": "text", "text": 3}]}, ""),
        ({"role": "user", "content": None}, ""),
        ({"role": "user"}, ""),
        ("not a message", ""),
    ],
)
def test_message_text(message: object, expected: str) -> None:
    assert message_text(message) == expected


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], None),
        ([{"role": "assistant", "content": "x"}], None),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], 0),
        ([{"role": "user"}, {"role": "toolResult"}, {"role": "user"}, {"role": "assistant"}], 2),
        (["junk", {"role": "user"}], 1),
    ],
)
def test_latest_user_index(messages: list, expected: int | None) -> None:
    assert latest_user_index(messages) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", False),
        ("hello", False),
        (BLOCK, True),
        ("Source: openviking-auto-recal", False),
        ({"role": "user", "content": BLOCK + "\n\nq"}, True),
        ({"role": "user", "content": [{"type": "text", "text": BLOCK}]}, True),
        ({"role": "user", "content": [{"type": "image", "text": BLOCK}]}, False),
        ({"role": "user", "content": "q"}, False),
        # a list: only the latest user message counts
        ([{"role": "user", "content": "q"}], False),
        ([{"role": "user", "content": BLOCK}, {"role": "assistant", "content": "a"}], True),
        ([{"role": "user", "content": BLOCK}, {"role": "user", "content": "new"}], False),
        ([{"role": "assistant", "content": BLOCK}], False),
        ((), False),
        (None, False),
        (42, False),
    ],
)
def test_has_recall_marker(value: object, expected: bool) -> None:
    assert has_recall_marker(value) is expected
