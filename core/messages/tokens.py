"""Character-weighted token estimate, the one OpenViking uses for pending_tokens.

Weights per code point: 1.5 for CJK (ideographs incl. the astral extension
planes, kana, Hangul syllables and jamo, CJK symbols and punctuation,
fullwidth/halfwidth forms), 2.0 for any other code point above U+FFFF (emoji),
0.25 for everything else; the sum is rounded up.

Checked against openviking 0.5.2's ``openviking/utils/token_estimation.py``
(``estimate_text_tokens``): same ranges, same weights, same rounding, so our
budget arithmetic and the server's pending_tokens agree. The reference plugin's
token-estimator.ts uses the same table.

We count in quarter tokens (1, 6 or 8 units) to stay in integers. The hot
path (assemble over a 200-message transcript, mostly ASCII JSON) does no
per-character Python work: pure ASCII is just a length; otherwise the ASCII
bytes are deleted from the UTF-8 encoding in C (they never occur inside a
multi-byte sequence, so the rest still decodes) and only the few remaining
characters are classified by regex. About 10x faster than scanning the whole
text with a regex on typical mixed transcripts.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

_CJK_CLASS = (
    "\u1100-\u11ff"  # Hangul jamo
    "\u3000-\u303f"  # CJK symbols and punctuation
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3130-\u318f"  # Hangul compatibility jamo
    "\u31f0-\u31ff"  # katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff00-\uffef"  # halfwidth and fullwidth forms
    "\U00020000-\U0002ebef"  # CJK extensions B-F (astral, yet weighted as CJK)
)
_CJK_RUNS = re.compile(f"[{_CJK_CLASS}]+")
# Astral code points outside the CJK extension planes: emoji and the like.
_ASTRAL_RUNS = re.compile("[\U00010000-\U0001ffff\U0002ebf0-\U0010ffff]+")

_ASCII_BYTES = bytes(range(0x80))

_UNITS_PER_TOKEN = 4  # a plain character is one unit, i.e. 0.25 token
_EXTRA_UNITS_CJK = 6 - 1
_EXTRA_UNITS_ASTRAL = 8 - 1


def _ceil_tokens(units: int) -> int:
    return -(-units // _UNITS_PER_TOKEN)


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text`` (0 for empty)."""
    if not text:
        return 0
    units = len(text)
    if not text.isascii():
        # surrogatepass: a lone surrogate (possible in Python text) must not fail.
        heavy = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_BYTES).decode("utf-8", "surrogatepass")
        cjk = sum(len(run) for run in _CJK_RUNS.findall(heavy))
        astral = sum(len(run) for run in _ASTRAL_RUNS.findall(heavy))
        units += cjk * _EXTRA_UNITS_CJK + astral * _EXTRA_UNITS_ASTRAL
    return _ceil_tokens(units)


def compact_json(value: Any) -> str:
    """The JSON the estimate is taken over: like JavaScript's JSON.stringify,
    no spaces and non-ASCII kept as is (escaping would inflate CJK 4x). A struct (an OV
    record) is measured as the JSON it encodes to."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain)


def _plain(value: Any) -> Any:
    return msgspec.to_builtins(value) if isinstance(value, msgspec.Struct) else str(value)


def estimate_message_tokens(messages: Any) -> int:
    """Estimated tokens of messages (or any JSON-able value) as serialised.

    A bare string is estimated as text, not as a JSON string literal, as the
    reference does; None is 0.
    """
    if messages is None:
        return 0
    if isinstance(messages, str):
        return estimate_tokens(messages)
    return estimate_tokens(compact_json(messages))
