"""core.recall.hits: hit selection, ranking, the injected block, prepending it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.recall.hits import (
    RecallHit,
    candidate_limit,
    fallback_content,
    lexical_overlap_boost,
    needs_full_read,
    rank_score,
    recall_category,
    select_recall_hits,
    to_hit,
)
from tests.helpers.recall import MEM, hit, names

# --- to_hit ------------------------------------------------------------------------


@dataclass
class AttrHit:
    uri: str
    level: int
    score: float
    abstract: str
    context_type: str


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"uri": "viking://a", "level": 2, "score": 0.5, "abstract": "x", "context_type": "memory"},
            RecallHit(uri="viking://a", level=2, score=0.5, abstract="x", context_type="memory"),
        ),
        (
            AttrHit("viking://a", 1, 0.25, "y", "resource"),
            RecallHit(uri="viking://a", level=1, score=0.25, abstract="y", context_type="resource"),
        ),
        ({"uri": "viking://a"}, RecallHit(uri="viking://a")),
        ({"uri": "viking://a", "level": "2", "score": "0.5"}, RecallHit(uri="viking://a", level=2, score=0.5)),
        ({"uri": "viking://a", "level": "x", "score": "nan"}, RecallHit(uri="viking://a", level=None, score=0.0)),
        ({"uri": "viking://a", "score": None, "abstract": None}, RecallHit(uri="viking://a")),
        ({"uri": "viking://a", "category": "events"}, RecallHit(uri="viking://a", category="events")),
        ({}, RecallHit(uri="")),
    ],
)
def test_to_hit(raw: object, expected: RecallHit) -> None:
    assert to_hit(raw) == expected


def test_to_hit_passes_a_recall_hit_through() -> None:
    h = RecallHit(uri="viking://a", score=0.3)
    assert to_hit(h) is h


@pytest.mark.parametrize(("recall_limit", "expected"), [(1, 20), (5, 20), (6, 24), (10, 40), (0, 20)])
def test_candidate_limit(recall_limit: int, expected: int) -> None:
    assert candidate_limit(recall_limit) == expected


@pytest.mark.parametrize(
    ("uri", "category", "expected"),
    [
        (f"{MEM}/preferences/dark-mode.md", "", "preferences"),
        (f"{MEM}/profile.md", "", "profile"),
        (f"{MEM}/events/2026-04-10.md", "", "events"),
        (f"{MEM}/entities/alice.md", "", "entities"),
        (f"{MEM}/cases/x.md", "", "cases"),
        (f"{MEM}/experiences/x.md", "", "experiences"),
        ("viking://~/memories/patterns/p.md", "", "patterns"),
        ("viking://user/u1/peers/main/memories/tools/t.md", "", "tools"),
        # the user id is not mistaken for a category (OV's substring check would)
        ("viking://user/casesmith/memories/preferences/x.md", "", "preferences"),
        (f"{MEM}/unknown/x.md", "", "memory"),
        (f"{MEM}/Preferences/x.md", "", "preferences"),
        (MEM, "", "memory"),
        ("viking://resources/docs/readme.md", "", "resource"),
        ("viking://session/abc/history", "", "memory"),
        # OV's own category wins
        (f"{MEM}/preferences/x.md", "custom", "custom"),
        (f"{MEM}/preferences/x.md", "  ", "preferences"),
    ],
)
def test_recall_category(uri: str, category: str, expected: str) -> None:
    assert recall_category(RecallHit(uri=uri, category=category)) == expected


# --- ranking -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "text", "expected"),
    [
        ((), "anything", 0.0),
        (("redis",), "", 0.0),
        (("redis",), "uses Redis streams", 0.2),
        (("redis", "python"), "redis only", 0.1),
        (("redis", "python"), "redis python", 0.2),
        (("a1", "b2", "c3", "d4"), "a1 b2", 0.1),
        (("a1", "b2", "c3", "d4", "e5", "f6"), "a1 b2 c3 d4", 0.2),  # four found is full marks
        (("a1", "b2", "c3", "d4", "e5", "f6"), "a1 b2", 0.1),
        # only the first eight words are looked for
        (tuple(f"w{i}" for i in range(10)), "w8 w9", 0.0),
        (("dark",), "darkmode", 0.2),  # substring, as in the reference
    ],
)
def test_lexical_overlap_boost(tokens: tuple[str, ...], text: str, expected: float) -> None:
    assert lexical_overlap_boost(tokens, text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("raw", "query", "expected"),
    [
        (hit("a", 0.5), None, 0.62),  # leaf boost
        (hit("a", 0.5, level=None), None, 0.5),
        (hit("a", 1.7), None, 1.12),  # score clamped to 1
        (hit("a", -3.0, level=None), None, 0.0),
        (hit("a", 0.5, abstract="likes redis streams"), "redis", 0.82),
        # one of four query words found: a quarter of the overlap boost
        (hit("a", 0.5, abstract="likes redis streams"), "tell about redis please", 0.67),
        # stopwords and one-letter words are not query words
        (hit("a", 0.5, abstract="what is the"), "what is the", 0.62),
        # the URI counts as text too
        (hit("redis-notes.md", 0.5, abstract="zzz"), "redis", 0.82),
        # a time question lifts events, a likes question lifts preferences
        (hit("events/e.md", 0.5, abstract="zzz"), "when did we meet", 0.72),
        (hit("events/e.md", 0.5, abstract="zzz"), "zebra", 0.62),
        # words match as substrings, of the URI too: "me" is in "memories"
        (hit("events/e.md", 0.5, abstract="zzz"), "me", 0.82),
        (hit("preferences/p.md", 0.5, abstract="zzz"), "我喜欢什么", 0.70),
        (hit("preferences/p.md", 0.5, abstract="zzz"), "stuff", 0.62),
        # the scheme is not text: "in" does not match "viking://"
        (hit("a", 0.5, abstract="zzz"), "in", 0.62),
    ],
)
def test_rank_score(raw: dict, query: str | None, expected: float) -> None:
    assert rank_score(raw, query) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("hits", "kwargs", "expected"),
    [
        # sorted by score, cut to the limit
        ([hit("a", 0.3), hit("b", 0.9), hit("c", 0.6)], {"limit": 2}, ["b", "c"]),
        ([hit("a", 0.3), hit("b", 0.9)], {"limit": 0}, []),
        ([], {"limit": 5}, []),
        # below the threshold goes; at it stays
        ([hit("a", 0.1), hit("b", 0.15), hit("c", 0.2)], {"limit": 5}, ["c", "b"]),
        # directory abstracts (levels 0 and 1) go; a missing level stays
        ([hit("a", 0.9, level=0), hit("b", 0.8, level=1), hit("c", 0.2, level=None)], {"limit": 5}, ["c"]),
        # leaves first, even when a level-less hit scores higher
        ([hit("x", 0.95, level=None), hit("y", 0.3)], {"limit": 5}, ["y", "x"]),
        ([hit("x", 0.95, level=None), hit("y", 0.3)], {"limit": 1}, ["y"]),
        # same URI twice: the better score counts
        (
            [hit("a", 0.2), hit("b", 0.5), hit("a", 0.9, abstract="abstract of a")],
            {"limit": 5},
            ["a", "b"],
        ),
        ([hit("a", 0.9), hit("a", 0.1)], {"limit": 5}, ["a"]),
        # same abstract (case and spacing aside): the best-ranked stays
        (
            [hit("a", 0.5, abstract="Likes  Tea"), hit("b", 0.7, abstract="likes tea"), hit("c", 0.4)],
            {"limit": 5},
            ["b", "c"],
        ),
        # two events (or cases) in the same words are two memories: both stay
        (
            [
                hit("events/e1.md", 0.9, abstract="Met Bob at the cafe"),
                hit("events/e2.md", 0.9, abstract="Met Bob at the cafe"),
            ],
            {"limit": 5},
            ["events/e1.md", "events/e2.md"],
        ),
        (
            [
                hit("cases/c1.md", 0.8, abstract="restart fixed it"),
                hit("cases/c2.md", 0.7, abstract="restart fixed it"),
            ],
            {"limit": 5},
            ["cases/c1.md", "cases/c2.md"],
        ),
        # the same words in two categories are two memories; twice in one category, one
        (
            [
                hit("preferences/p.md", 0.9, abstract="likes tea"),
                hit("entities/t.md", 0.8, abstract="likes tea"),
                hit("preferences/q.md", 0.7, abstract="Likes tea"),
            ],
            {"limit": 5},
            ["preferences/p.md", "entities/t.md"],
        ),
        # empty abstracts are not duplicates of each other
        ([hit("a", 0.5, abstract=""), hit("b", 0.4, abstract="  ")], {"limit": 5}, ["a", "b"]),
        # the query lifts a lower-scored hit over a higher one
        (
            [hit("a", 0.6, abstract="likes tea"), hit("b", 0.5, abstract="runs redis in production")],
            {"limit": 5, "query": "which redis runs in production?"},
            ["b", "a"],
        ),
        (
            [hit("a", 0.6, abstract="likes tea"), hit("b", 0.5, abstract="runs redis in production")],
            {"limit": 5},
            ["a", "b"],
        ),
        # hits without a URI are dropped
        ([{"uri": "", "score": 0.9, "level": 2}, hit("a", 0.5)], {"limit": 5}, ["a"]),
        # equal rank: raw score, then URI, decide
        ([hit("b", 0.5), hit("a", 0.5)], {"limit": 5}, ["a", "b"]),
    ],
)
def test_select_recall_hits(hits: list[dict], kwargs: dict, expected: list[str]) -> None:
    kwargs = {"score_threshold": 0.15, **kwargs}
    assert names(select_recall_hits(hits, **kwargs)) == expected


def test_select_recall_hits_accepts_objects_and_keeps_the_original_score() -> None:
    selected = select_recall_hits(
        [AttrHit(f"{MEM}/a", 2, 0.4, "tea", "memory")], limit=3, score_threshold=0.1, query="tea"
    )
    assert selected == [RecallHit(uri=f"{MEM}/a", level=2, score=0.4, abstract="tea", context_type="memory")]


hit_strategy = st.builds(
    lambda n, s, lv, ab: hit(f"m{n}", s, level=lv, abstract=ab),
    st.integers(0, 15),
    st.floats(-0.5, 1.5, allow_nan=False),
    st.sampled_from([None, 0, 1, 2]),
    st.sampled_from(["", "tea", "Tea", "redis", "go"]),
)


@given(st.lists(hit_strategy, max_size=30), st.integers(0, 8), st.floats(0, 1))
def test_select_recall_hits_invariants(hits: list[dict], limit: int, threshold: float) -> None:
    selected = select_recall_hits(hits, limit=limit, score_threshold=threshold, query="tea")
    assert len(selected) <= limit
    uris = [h.uri for h in selected]
    assert len(uris) == len(set(uris))
    for h in selected:
        assert h.level in (None, 2)
        assert min(max(h.score, 0.0), 1.0) >= threshold
        # the best score seen for that URI
        assert h.score == max(x["score"] for x in hits if x["uri"] == h.uri)
    abstracts = [" ".join(h.abstract.lower().split()) for h in selected if h.abstract.strip()]
    assert len(abstracts) == len(set(abstracts))
    levels = [h.level for h in selected]
    assert levels == sorted(levels, key=lambda lv: lv != 2)  # leaves first


# --- content choice ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "prefer_abstract", "expected"),
    [
        (hit("a", 0.5), False, True),
        (hit("a", 0.5), True, False),
        (hit("a", 0.5, abstract="  "), True, True),  # no abstract to prefer
        (hit("a", 0.5, level=None), False, False),
        (hit("a", 0.5, level=1), False, False),
    ],
)
def test_needs_full_read(raw: dict, prefer_abstract: bool, expected: bool) -> None:
    assert needs_full_read(raw, prefer_abstract) is expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(hit("a", 0.5, abstract="  tea  "), "tea"), (hit("a", 0.5, abstract=""), f"{MEM}/a")],
)
def test_fallback_content(raw: dict, expected: str) -> None:
    assert fallback_content(raw) == expected
