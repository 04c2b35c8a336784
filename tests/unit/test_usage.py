"""core.usage: the buckets, fields and the bounded tenant list of a metrics scrape (table-
driven and properties); ``ovstream usage``'s table and spark line."""

from __future__ import annotations

import calendar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.usage import OTHER_TENANTS, OWN_USER, USAGE, add_up, bucket, buckets_back, field, parse_field, top_tenants
from workers.cli.usage import render, spark

AT = calendar.timegm((2026, 12, 6, 11, 59, 59))


@pytest.mark.parametrize(
    ("period", "at", "name"),
    [
        ("hour", AT, "2026-12-06T11"),
        ("hour", AT + 1, "2026-12-06T12"),
        ("day", AT, "2026-12-06"),
        ("day", AT + 12 * 3600 + 1, "2026-12-07"),
    ],
)
def test_a_bucket_is_its_utc_hour_or_day(period: str, at: float, name: str) -> None:
    assert bucket(period, at) == name


def test_the_last_buckets_end_with_the_current_one() -> None:
    assert buckets_back("hour", AT, 3) == ["2026-12-06T09", "2026-12-06T10", "2026-12-06T11"]
    assert buckets_back("day", AT, 2) == ["2026-12-05", "2026-12-06"]
    assert buckets_back("day", AT, 0) == []


@pytest.mark.parametrize(
    ("tenant", "count", "raw"),
    [
        ("acme", "assembles", "acme|assembles"),
        (None, "tool_calls", f"{OWN_USER}|tool_calls"),
        ("a|b", "commits", "a|b|commits"),
    ],
)
def test_a_field_names_its_tenant_and_count_and_reads_back(tenant: str | None, count: str, raw: str) -> None:
    assert field(tenant, count) == raw
    assert parse_field(raw) == (tenant or OWN_USER, count)


def test_a_field_of_an_unknown_count_is_left_out() -> None:
    assert parse_field("acme|something-new") is None and parse_field("no-separator") is None


_usage = st.dictionaries(
    st.text(min_size=1, max_size=6),
    st.dictionaries(st.sampled_from(sorted(USAGE)), st.integers(0, 1000), min_size=1),
    max_size=12,
)


@given(usage=_usage, named=st.integers(0, 5))
def test_the_named_tenants_and_the_rest_add_up_to_the_whole(usage: dict[str, dict[str, int]], named: int) -> None:
    shown = top_tenants(usage, named)
    assert len(shown) <= named + 1
    if not usage:
        assert shown == {}
    whole, parts = add_up([usage]), shown
    for name in USAGE:
        assert sum(c.get(name, 0) for c in whole.values()) == sum(c.get(name, 0) for c in parts.values())
    if len(usage) > named:
        assert OTHER_TENANTS in shown


def test_the_busiest_by_ov_requests_are_named() -> None:
    usage = {"small": {"ov_requests": 1}, "big": {"ov_requests": 50}, "mid": {"ov_requests": 5, "turns_captured": 1}}
    assert top_tenants(usage, 2) == {
        "big": {"ov_requests": 50},
        "mid": {"ov_requests": 5, "turns_captured": 1},
        OTHER_TENANTS: {"ov_requests": 1},
    }


def test_a_spark_line_scales_to_the_largest_and_leaves_none_blank() -> None:
    assert spark([0, 1, 4, 8]) == " ▁▄█"
    assert spark([0, 0]) == "  " and spark([]) == ""


def test_the_table_sums_the_buckets_per_tenant() -> None:
    out = render(
        {
            "2026-12-05": {"acme": {"ov_requests": 2, "turns_captured": 3}},
            "2026-12-06": {"acme": {"ov_requests": 4}, "-": {"assembles": 1}},
        },
        "day",
    )
    lines = out.splitlines()
    assert "the last 2 day(s): 2026-12-05 .. 2026-12-06" in lines[0]
    acme = next(line for line in lines if line.startswith("acme"))
    assert acme.split()[1] == "3" and "6" in acme.split() and acme.endswith("▄█")
    assert render({"2026-12-06": {}}, "day") == "no usage recorded in the last 1 day(s)"


def test_a_flush_with_redis_away_keeps_the_counts_for_the_next() -> None:
    import redis

    from core.config import Settings
    from workers.store.usage import UsageTally, flush

    tally = UsageTally()
    tally.add("acme", "assembles", 3)
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    away = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))  # nothing listens there
    assert flush(away, Settings(redis_url="fakeredis://"), tally) == 0  # no error raised to its loop
    assert tally.take() == {("acme", "assembles"): 3}
