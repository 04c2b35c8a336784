"""core.messages.tokens: the character-weighted estimate OV uses for pending_tokens."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.messages.tokens import compact_json, estimate_message_tokens, estimate_tokens

# The weight table written out a second, naive way, as the oracle.
_CJK_RANGES = [
    (0x1100, 0x11FF),
    (0x3000, 0x303F),
    (0x3040, 0x30FF),
    (0x3130, 0x318F),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
    (0x20000, 0x2EBEF),
]


def naive_estimate(text: str) -> int:
    total = 0.0
    for ch in text:
        cp = ord(ch)
        if any(lo <= cp <= hi for lo, hi in _CJK_RANGES):
            total += 1.5
        elif cp > 0xFFFF:
            total += 2.0
        else:
            total += 0.25
    return math.ceil(total)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("a" * 400, 100),
        ("a" * 401, 101),
        ("é", 1),  # Latin-1: a plain character
        ("привет", 2),  # Cyrillic: plain
        ("你好", 3),  # 2 x 1.5
        ("你", 2),  # 1.5 rounds up
        ("こんにちは", 8),  # kana: 5 x 1.5 = 7.5
        ("カタカナ", 6),
        ("한국어", 5),  # Hangul syllables: 4.5
        ("ᄀ", 2),  # Hangul jamo U+1100
        ("ㄱ", 2),  # compatibility jamo U+3131
        ("、。", 3),  # CJK punctuation U+3001/U+3002
        ("ｈ", 2),  # fullwidth form
        ("豈", 2),  # compatibility ideograph U+F900
        ("😀", 2),  # emoji: astral
        ("😀😀😀", 6),
        ("𠀀", 2),  # CJK extension B is astral but weighs 1.5
        ("𠀀𠀀𠀀", 5),
        ("\U0002ebf0", 2),  # just past the CJK extensions: astral weight
        ("\U0002ebf0\U0002ebf0\U0002ebf0", 6),
        ("hi 你好 😀", 6),  # 4 x 0.25 + 3 + 2
        ("\ud83d", 1),  # a lone surrogate is a plain BMP code point
        ("a\udc00你", 2),  # and does not break the non-ASCII path
    ],
)
def test_estimate_tokens(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


@given(st.text())
def test_estimate_tokens_agrees_with_the_weight_table(text: str) -> None:
    assert estimate_tokens(text) == naive_estimate(text)


# Every boundary of the table, and lone surrogates, mixed with ASCII.
_EDGES = [chr(c) for lo, hi in _CJK_RANGES for c in (lo - 1, lo, hi, hi + 1)]
_EDGES += ["\ud800", "\udfff", "\uffff", "\U00010000", "\U0010ffff", "a", "\n", '"']


@given(st.lists(st.sampled_from(_EDGES)))
def test_estimate_tokens_at_the_range_edges(chars: list[str]) -> None:
    text = "".join(chars)
    assert estimate_tokens(text) == naive_estimate(text)


@given(st.text(), st.text())
def test_estimate_tokens_is_subadditive_within_one_token(a: str, b: str) -> None:
    # Rounding happens once per call, so a split costs at most one token.
    joined = estimate_tokens(a + b)
    assert joined <= estimate_tokens(a) + estimate_tokens(b) <= joined + 1


@pytest.mark.parametrize(
    ("value", "expected_json"),
    [
        ([], "[]"),
        ({"role": "user", "content": "hi"}, '{"role":"user","content":"hi"}'),
        ([{"role": "user", "content": "你好"}], '[{"role":"user","content":"你好"}]'),
        ({"a": [1, 2.5, True, None]}, '{"a":[1,2.5,true,null]}'),
    ],
)
def test_compact_json_matches_json_stringify(value: object, expected_json: str) -> None:
    assert compact_json(value) == expected_json


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (None, 0),
        ("plain text", 3),  # a string is text, not a JSON literal (no quotes counted)
        ([], 1),  # "[]"
        ([{"role": "user", "content": "hi"}], 8),  # 32 chars
        ([{"role": "user", "content": "你好"}], 11),  # 30 plain chars + 2 CJK
        ({"content": "😀"}, 6),  # 14 plain chars (3.5) + 2, rounded up
    ],
)
def test_estimate_message_tokens(messages: object, expected: int) -> None:
    assert estimate_message_tokens(messages) == expected


def test_estimate_message_tokens_is_taken_over_compact_json() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "remember 我喜欢 Python 🐍"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stopReason": "stop"},
    ]
    serialised = json.dumps(messages, ensure_ascii=False, separators=(",", ":"))
    assert estimate_message_tokens(messages) == naive_estimate(serialised)
    # ensure_ascii would have turned each CJK char into a 6-char escape
    assert estimate_message_tokens(messages) < naive_estimate(json.dumps(messages))


def test_estimate_message_tokens_grows_with_messages() -> None:
    one = [{"role": "user", "content": "hello there"}]
    assert estimate_message_tokens(one * 2) > estimate_message_tokens(one)
