"""The plugin version rules (workers.rpc.plugins), table-driven: what is a version, what is
too old, and the versions remembered bounded by count and by age."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import defaults
from workers.rpc.plugins import VERDICTS_KEPT, SeenPlugins, refusal, release_of, verdict


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("0.2.0", (0, 2, 0)),
        ("10.20.30", (10, 20, 30)),
        ("0.3.0-rc.1", (0, 3, 0)),
        ("0.3.0+build.7", (0, 3, 0)),
        ("0.3", None),
        ("v0.3.0", None),
        ("0.3.0 ", None),
        ("", None),
        ("0.3.0-" + "x" * 40, None),
    ],
)
def test_release_of(text: str, release: tuple[int, int, int] | None) -> None:
    assert release_of(text) == release


@given(st.tuples(st.integers(0, 9999), st.integers(0, 9999), st.integers(0, 9999)))
def test_refused_exactly_when_older_than_the_oldest_supported(release: tuple[int, int, int]) -> None:
    oldest = release_of(defaults.MIN_PLUGIN_VERSION)
    assert oldest is not None
    refused = refusal(".".join(map(str, release)))
    assert (refused is not None) == (release < oldest)
    if refused is not None:
        assert refused[:2] == (426, "plugin_too_old")


def test_seen_plugins_forget_the_oldest_and_the_silent() -> None:
    seen = SeenPlugins()
    for n in range(defaults.PLUGIN_VERSIONS_KEPT + 5):
        seen.saw(f"0.{n}.0", now=float(n))
    kept = seen.recent(now=float(defaults.PLUGIN_VERSIONS_KEPT + 5))
    assert len(kept) == defaults.PLUGIN_VERSIONS_KEPT and "0.0.0" not in kept  # bounded by count
    seen.saw("0.2.0", now=1_000.0)
    assert seen.recent(now=1_000.0 + defaults.PLUGIN_SEEN_S / 2) == ["0.2.0"]  # the silent ones went
    assert seen.recent(now=1_000.0 + defaults.PLUGIN_SEEN_S + 1) == []


def test_a_header_values_verdict_is_remembered_bounded_and_follows_the_oldest_accepted() -> None:
    verdict.cache_clear()
    assert verdict(b" 0.3.0 ", "0.1.0") == ("0.3.0", None)
    assert verdict(b" 0.3.0 ", "0.1.0") == ("0.3.0", None)
    info = verdict.cache_info()
    assert (info.hits, info.misses) == (1, 1)  # the second call parsed nothing
    assert verdict(b"0.3.0", "0.4.0")[1] is not None  # another oldest accepted: judged afresh
    assert verdict(b"nonsense", "0.1.0")[1] == refusal("nonsense")
    for n in range(VERDICTS_KEPT * 2):  # any number of odd values: bounded
        verdict(f"9.9.{n}".encode(), "0.1.0")
    assert verdict.cache_info().currsize == VERDICTS_KEPT
