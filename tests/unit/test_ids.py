"""core.ids: session id mapping, agent id resolution, bypass globs."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.ids import (
    agent_id_from_session_key,
    is_bypassed,
    ov_session_id,
    resolve_agent_id,
    sanitize_agent_id,
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


UUID_UPPER = "A1B2C3D4-E5F6-7890-ABCD-EF1234567890"


@pytest.mark.parametrize(
    ("session_id", "session_key", "expected"),
    [
        # a UUID wins over everything, lower-cased
        (UUID_UPPER, None, UUID_UPPER.lower()),
        (UUID_UPPER, "agent:main:x", UUID_UPPER.lower()),
        (" " + UUID_UPPER + " ", None, UUID_UPPER.lower()),
        ("a1b2c3d4-e5f6-7890-abcd-ef1234567890", "", "a1b2c3d4-e5f6-7890-abcd-ef1234567890"),
        # not quite a UUID: falls through to the key
        ("a1b2c3d4-e5f6-7890-abcd-ef123456789", "k", sha("k")),
        ("a1b2c3d4e5f67890abcdef1234567890", "k", sha("k")),
        # a non-empty key is hashed (trimmed first)
        ("plain", "agent:main:telegram:123", sha("agent:main:telegram:123")),
        ("plain", "  agent:main:x  ", sha("agent:main:x")),
        ("", "agent:myagent:session123", sha("agent:myagent:session123")),
        # blank key: the session id decides
        ("plain-session", "   ", "plain-session"),
        ("plain-session", None, "plain-session"),
        ("  padded  ", None, "padded"),
        ("under_score.dot-dash", None, "under_score.dot-dash"),
        # Windows-illegal characters: salted hash
        ("C:\\Users\\test", None, sha("openclaw-session:C:\\Users\\test")),
        ("a:b", None, sha("openclaw-session:a:b")),
        ("a<b", None, sha("openclaw-session:a<b")),
        ("a>b", None, sha("openclaw-session:a>b")),
        ('a"b', None, sha('openclaw-session:a"b')),
        ("a/b", None, sha("openclaw-session:a/b")),
        ("a|b", None, sha("openclaw-session:a|b")),
        ("a?b", None, sha("openclaw-session:a?b")),
        ("a*b", None, sha("openclaw-session:a*b")),
        ("a\x00b", None, sha("openclaw-session:a\x00b")),
        ("a\x1fb", None, sha("openclaw-session:a\x1fb")),
        ("a\tb", None, sha("openclaw-session:a\tb")),
        # U+007F is not in the illegal set
        ("a\x7fb", None, "a\x7fb"),
        # ovstream's extension: dot segments, and all-whitespace ids (hashed untrimmed)
        (".", None, sha("openclaw-session:.")),
        (" .. ", None, sha("openclaw-session:..")),
        ("...", None, "..."),
        ("   ", None, sha("openclaw-session:   ")),
        ("\t", "  ", sha("openclaw-session:\t")),
    ],
)
def test_ov_session_id(session_id: str, session_key: str | None, expected: str) -> None:
    assert ov_session_id(session_id, session_key) == expected


@pytest.mark.parametrize(("session_id", "session_key"), [("", None), ("", ""), ("", "  ")])
def test_ov_session_id_needs_something(session_id: str, session_key: str | None) -> None:
    with pytest.raises(ValueError, match="sessionId or sessionKey"):
        ov_session_id(session_id, session_key)


def test_ov_session_id_known_digest() -> None:
    # Pinned so a change of hashing (encoding, salt) cannot slip through.
    assert ov_session_id("x", "agent:main:telegram:123") == (
        "062d87cd30e068a70b1231273256767191ff73b54e35e3cda3ab11d4866d4467"
    )
    assert ov_session_id("C:\\Users\\test", None) == (
        "80277646b849cd6b15cf1b8e0ccd7bec51f6c7a34c1cc21d0cad8a8995ac8e6a"
    )


@given(st.text(min_size=1), st.one_of(st.none(), st.text()))
def test_ov_session_id_is_a_safe_path_segment(session_id: str, session_key: str | None) -> None:
    result = ov_session_id(session_id, session_key)
    assert result and result == result.strip() and result not in (".", "..")
    assert not any(ch in result for ch in ':<>"\\/|?*') and all(ord(ch) >= 0x20 for ch in result)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("main", "main"),
        ("agent-abc_1", "agent-abc_1"),
        ("agent:role:v1", "agent_role_v1"),
        ("a  b", "a_b"),
        ("__a__", "a"),
        ("a___b", "a_b"),
        ("a:_:b", "a_b"),
        ("@#$%", ""),
        ("   ", ""),
        ("日本", ""),
        ("José", "Jos"),
        (" x ", "x"),
    ],
)
def test_sanitize_agent_id(raw: str, expected: str) -> None:
    assert sanitize_agent_id(raw) == expected


@pytest.mark.parametrize(
    ("session_key", "expected"),
    [
        ("agent:worker:session123", "worker"),
        ("agent:ops:maintenance:weekly", "ops"),
        ("  agent:worker:x  ", "worker"),
        ("agent:worker", None),  # needs the trailing ":<rest>"
        ("agent::x", None),
        ("agent: :x", None),
        ("xagent:worker:x", None),
        ("Agent:worker:x", None),
        ("", None),
        (None, None),
    ],
)
def test_agent_id_from_session_key(session_key: str | None, expected: str | None) -> None:
    assert agent_id_from_session_key(session_key) == expected


@pytest.mark.parametrize(
    ("session_key", "runtime_agent_id", "prefix", "expected"),
    [
        ("agent:worker:session123", None, "", "worker"),
        ("agent:worker:session123", "agent-abc", "", "worker"),  # the key wins
        ("telegram:123", "agent-abc", "", "agent-abc"),
        (None, "agent-abc", "", "agent-abc"),
        (None, "  agent-abc ", "", "agent-abc"),
        (None, None, "", "main"),
        ("", "", "", "main"),
        (None, "@@@", "", "main"),  # nothing survives sanitising
        ("agent:a.b:x", None, "", "a_b"),
        (None, "ops:night", "", "ops_night"),
        ("agent:worker:session123", None, "prefix", "prefix_worker"),
        (None, None, "prefix", "prefix_main"),
        (None, "@@@", "team", "team_main"),
        (None, "x", "my team", "my_team_x"),
        (None, "x", "__", "x"),  # a prefix that sanitises away is no prefix
        (None, "x", "  ", "x"),
    ],
)
def test_resolve_agent_id(session_key: str | None, runtime_agent_id: str | None, prefix: str, expected: str) -> None:
    assert resolve_agent_id(session_key, runtime_agent_id, prefix) == expected


def test_resolve_agent_id_prefix_defaults_to_none() -> None:
    assert resolve_agent_id(None, "bob") == "bob"


@given(st.one_of(st.none(), st.text()), st.one_of(st.none(), st.text()), st.text(max_size=8))
def test_resolve_agent_id_is_always_a_valid_peer_id(key: str | None, runtime: str | None, prefix: str) -> None:
    result = resolve_agent_id(key, runtime, prefix)
    assert result
    assert all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in result)
    assert "__" not in result and not result.startswith("_") and not result.endswith("_")


CRON = ("agent:*:cron:**", "agent:ops:maintenance:**")


@pytest.mark.parametrize(
    ("patterns", "session_id", "session_key", "expected"),
    [
        (CRON, "s", "agent:main:cron:nightly:run:1", True),
        (CRON, "s", "agent:ops:maintenance:weekly", True),
        (CRON, "s", "agent:main:main", False),
        # `*` does not cross a `:`
        (CRON, "s", "agent:a:b:cron:x", False),
        (("agent:*",), "s", "agent:a:b", False),
        (("agent:*",), "s", "agent:", True),
        (("agent:**",), "s", "agent:a:b", True),
        (("agent:**",), "s", "agent:", True),
        # full match only
        (("cron",), "s", "agent:main:cron", False),
        (("**cron**",), "s", "agent:main:cron:x", True),
        # the key is matched when present, the id otherwise
        (("agent:*:cron:**",), "agent:main:cron:from-id", "agent:main:main", False),
        (("agent:*:cron:**",), "agent:main:cron:nightly:run:1", None, True),
        (("agent:*:cron:**",), "agent:main:cron:nightly:run:1", "   ", True),
        (("  padded",), "s", "  padded  ", False),  # the candidate is trimmed, the pattern is not
        (("padded",), "s", "  padded  ", True),
        # regex metacharacters are literal, `?` included
        (("a.b",), "s", "axb", False),
        (("a.b",), "s", "a.b", True),
        (("a?b",), "s", "ab", False),
        (("a?b",), "s", "a?b", True),
        (("a+b",), "s", "aab", False),
        (("[ab]",), "s", "a", False),
        (("[ab]",), "s", "[ab]", True),
        (("x(y)|z",), "s", "z", False),
        (("a\\b",), "s", "a\\b", True),
        # no patterns or nothing to match
        ((), "s", "agent:main:cron:x", False),
        (("**",), "", None, False),
        (("**",), "   ", "", False),
        (("**",), "anything", None, True),
        (("*",), "no-colon", None, True),
        (("*",), "has:colon", None, False),
        (("**",), "multi\nline", None, True),
    ],
)
def test_is_bypassed(patterns: tuple[str, ...], session_id: str, session_key: str | None, expected: bool) -> None:
    assert is_bypassed(patterns, session_id, session_key) is expected


def test_is_bypassed_accepts_a_list() -> None:
    assert is_bypassed(["agent:*:cron:**"], "s", "agent:main:cron:x") is True
