"""core.uris: the canonical form of a caller's viking:// URI, and what is a memory."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.uris import UriError, is_memory_uri, normalize_uri


@pytest.mark.parametrize(
    ("uri", "canonical"),
    [
        ("viking://~/memories", "viking://~/memories"),
        ("viking://~/memories/", "viking://~/memories"),
        ("viking://~//memories///a.md", "viking://~/memories/a.md"),
        ("viking://~/memories/./a.md", "viking://~/memories/a.md"),
        ("viking://~/memories/x/../a.md", "viking://~/memories/a.md"),
        ("viking://~/memories/../../resources/x", "viking://resources/x"),
        ("viking://~/memories/%2e%2e/%2E%2E/resources", "viking://resources"),
        ("viking://~/memories/%252e%252e/a", "viking://~/a"),
        ("viking://~/memories/..%2f..%2fresources", "viking://resources"),
        ("viking://resources/caf%C3%A9.md", "viking://resources/café.md"),
        ("viking://resources/100%", "viking://resources/100%"),
        ("viking://resources/...", "viking://resources/..."),
        ("viking://", "viking://"),
    ],
)
def test_normalize_uri(uri: str, canonical: str) -> None:
    assert normalize_uri(uri) == canonical


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("http://x/y", "must start with"),
        ("viking://..", "climbs above"),
        ("viking://~/../../x", "climbs above"),
        ("viking://agent/memories/../../..", "climbs above"),
        ("viking://~/memories/%2525252e", "more than"),
        ("viking://~/memories/%ff", "not UTF-8"),
        ("viking://~/memories/a\\b", "backslash"),
        ("viking://~/memories/a%5c..%5cb", "backslash"),
        ("viking://~/memories/a%00", "control"),
    ],
)
def test_normalize_uri_refuses(uri: str, why: str) -> None:
    with pytest.raises(UriError, match=why):
        normalize_uri(uri)


_segment = st.sampled_from([".", "..", "", "%2e", "%2E%2e", "%252e%252e", "memories", "~", "a%2fb"]) | st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\\/"), max_size=4
)


@given(st.lists(_segment, max_size=8))
def test_a_canonical_uri_is_its_own_canonical_form(segments: list[str]) -> None:
    try:
        canonical = normalize_uri("viking://" + "/".join(segments))
    except UriError:
        return
    parts = canonical.removeprefix("viking://").split("/")
    assert canonical.startswith("viking://") and "\\" not in canonical
    assert canonical == "viking://" or not ({".", "..", ""} & set(parts))
    assert normalize_uri(canonical) == canonical


@pytest.mark.parametrize(
    ("uri", "user", "expected"),
    [
        ("viking://~/memories", None, True),
        ("viking://~/memories/preferences/m.md", None, True),
        ("viking://~/peers/main/memories/m.md", None, True),
        ("viking://user/alice/memories/m.md", None, True),
        ("viking://user/alice/memories/m.md", "alice", True),
        ("viking://user/bob/memories/m.md", "alice", False),
        ("viking://~/memories/m.md", "alice", True),
        ("viking://agent/memories/m.md", None, True),
        ("viking://agent/main/memories", None, True),
        ("viking://~/memoriesx", None, False),
        ("viking://resources/memories/m.md", None, False),
        ("viking://~/peers/main/skills", None, False),
    ],
)
def test_is_memory_uri(uri: str, user: str | None, expected: bool) -> None:
    assert is_memory_uri(uri, user=user) is expected
