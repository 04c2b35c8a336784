"""What a tenant costs, counted where the work happens (issue 58): what each count means, the
hour and day buckets they are kept in, and the few tenants a metrics scrape names.

Pure: the counting (a process's tally, flushed to Redis) is workers.store.usage.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

USAGE: dict[str, str] = {
    "turns_captured": "turns whose new messages capture wrote to OV",
    "messages_captured": "messages capture wrote to OV",
    "tokens_captured": "estimated tokens of the messages capture wrote to OV",
    "assembles": "assemble calls answered",
    "tokens_assembled": "estimated tokens of the context assemble answered",
    "memories_recalled": "memories auto-recall put in an answer",
    "tool_calls": "tool calls (memory_recall, memory_store, ...)",
    "commits": "commits that reached a final outcome",
    "commits_completed": "commits whose phase 2 completed",
    "commits_failed": "commits that failed (or timed out)",
    "memories_extracted": "memories phase 2 wrote",
    "repairs": "extraction repairs started",
    "ov_requests": "requests sent to OV (every try)",
    "dead_letters": "turn events set aside as dead letters",
    "quota_refusals": "calls refused by a quota (429)",
}
"""Every count kept per tenant, with what it counts."""

COLUMNS = (
    ("turns", "turns_captured"),
    ("tokens in", "tokens_captured"),
    ("assembles", "assembles"),
    ("tokens out", "tokens_assembled"),
    ("tools", "tool_calls"),
    ("commits", "commits"),
    ("failed", "commits_failed"),
    ("memories", "memories_extracted"),
    ("repairs", "repairs"),
    ("OV reqs", "ov_requests"),
    ("dead", "dead_letters"),
    ("429s", "quota_refusals"),
)
"""The columns a table of usage shows (``ovstream usage``, the console): (header, count)."""

PERIODS = {"hour": 3600, "day": 86400}
"""Bucket lengths (seconds)."""

OTHER_TENANTS = "(other)"
"""The label the tenants past the named ones share in a metrics scrape."""
OWN_USER = "-"
"""The label of the deployment's own user (a request with no tenant key)."""

FIELD_SEPARATOR = "|"
"""Between a tenant and a count in a bucket's field (the last one: a count name holds none)."""


def bucket(period: str, at: float) -> str:
    """The bucket of ``period`` that unix time ``at`` falls in, as UTC text that sorts by time
    (``2026-12-06T11`` for an hour, ``2026-12-06`` for a day)."""
    fmt = "%Y-%m-%dT%H" if period == "hour" else "%Y-%m-%d"
    return time.strftime(fmt, time.gmtime(at))


def buckets_back(period: str, now: float, count: int) -> list[str]:
    """The last ``count`` buckets of ``period`` up to the one of ``now``, oldest first."""
    step = PERIODS[period]
    return [bucket(period, now - i * step) for i in reversed(range(max(count, 0)))]


def field(tenant: str | None, count: str) -> str:
    """A bucket's field for ``tenant``'s ``count`` (None: the deployment's own user)."""
    return f"{tenant or OWN_USER}{FIELD_SEPARATOR}{count}"


def parse_field(raw: str) -> tuple[str, str] | None:
    """(tenant, count) of a bucket's field; None for one this release does not know."""
    tenant, sep, count = raw.rpartition(FIELD_SEPARATOR)
    return (tenant, count) if sep and count in USAGE else None


Usage = dict[str, dict[str, int]]
"""tenant -> count name -> value."""


def add_up(parts: Iterable[Mapping[str, Mapping[str, int]]]) -> Usage:
    """The sum of several buckets' usage."""
    total: Usage = {}
    for part in parts:
        for tenant, counts in part.items():
            mine = total.setdefault(tenant, {})
            for name, n in counts.items():
                mine[name] = mine.get(name, 0) + n
    return total


def busiest_first(usage: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The tenants of ``usage``, the busiest first: by OV requests, then by every count, then name."""
    return sorted(usage, key=lambda t: (-usage[t].get("ov_requests", 0), -sum(usage[t].values()), t))


def top_tenants(usage: Mapping[str, Mapping[str, int]], named: int) -> Usage:
    """``usage`` with the ``named`` busiest tenants (by OV requests, then by every count) under
    their names and the rest added up as ``OTHER_TENANTS``: a metrics scrape's series stay
    bounded however many tenants there are."""
    ranked = busiest_first(usage)
    kept = {t: dict(usage[t]) for t in ranked[: max(named, 0)]}
    rest = [usage[t] for t in ranked[max(named, 0) :]]
    if rest:
        kept[OTHER_TENANTS] = add_up([{OTHER_TENANTS: r} for r in rest])[OTHER_TENANTS]
    return kept
