"""What the deployment keeps in Redis, by key family (``Keys.family_of``): ``ovstream status``.

A sample, not an inventory: ``SCAN`` over the deployment's keys (every master of a cluster)
up to ``MEMORY_SAMPLE_KEYS``, each key's ``MEMORY USAGE`` and ``OBJECT IDLETIME``. The idle
time of the oldest applied offset is how long the oldest session state kept has gone
without a turn: with ``sessionStateTtlS`` it never passes that lifetime.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from core.config import Settings
from workers.store.connection import redis_went_away, text
from workers.store.keys import Keys

MEMORY_SAMPLE_KEYS = 20_000
"""Most keys one look at memory reads (a few hundred ms on a loopback Redis)."""
_BATCH = 500

STATE_FAMILIES = ("applied", "commits", "commit-gen")
"""The families of a session's state, whose oldest key says how old the oldest state kept is."""


@dataclass(slots=True)
class FamilyMemory:
    """One family's sampled keys: how many, their bytes, the longest any went untouched."""

    keys: int = 0
    bytes: int = 0
    oldest_idle_s: int = 0


@dataclass(slots=True)
class MemoryReport:
    """The deployment's keys by family, and whether the sample saw them all."""

    families: dict[str, FamilyMemory] = field(default_factory=dict)
    complete: bool = True
    problem: str | None = None
    """Why nothing could be measured (e.g. an embedded Redis without ``MEMORY USAGE``)."""
    by_owner: dict[str, int] = field(default_factory=dict)
    """Bytes by what ``read_memory``'s ``owner`` said of each key (empty without one)."""

    @property
    def keys(self) -> int:
        """Keys measured, over every family."""
        return sum(f.keys for f in self.families.values())

    @property
    def oldest_state_idle_s(self) -> int:
        """How long the oldest session state kept has gone untouched (0: none kept)."""
        return max((self.families[f].oldest_idle_s for f in STATE_FAMILIES if f in self.families), default=0)

    def as_json(self) -> dict[str, Any]:
        return {
            "families": {
                name: {"keys": f.keys, "bytes": f.bytes, "oldest_idle_s": f.oldest_idle_s}
                for name, f in sorted(self.families.items())
            },
            "complete": self.complete,
            "oldest_state_idle_s": self.oldest_state_idle_s,
            "problem": self.problem,
        }


def read_memory(
    client: redis.Redis,
    settings: Settings,
    *,
    sample: int = MEMORY_SAMPLE_KEYS,
    owner: Callable[[str], str] | None = None,
) -> MemoryReport:
    """Sample the deployment's keys and sum them by family (and by ``owner(key)``, when given:
    a bench tells the keys of sessions alive from those of sessions gone)."""
    keys, report = Keys(settings.key_prefix), MemoryReport()
    batch: list[str] = []
    try:
        for seen, raw in enumerate(client.scan_iter(match=keys.every_key(), count=1000), start=1):
            batch.append(text(raw))
            if len(batch) >= _BATCH:
                _measure(client, keys, batch, report, owner)
                batch = []
            if seen >= sample:
                report.complete = False
                break
        if batch:
            _measure(client, keys, batch, report, owner)
    except redis.ResponseError as exc:
        if redis_went_away(exc):  # a cluster's "not now": Redis away, not a refusal
            raise
        return MemoryReport(complete=False, problem=str(exc))  # MEMORY or OBJECT refused (embedded, an ACL)
    return report


def _measure(
    client: redis.Redis, keys: Keys, batch: list[str], report: MemoryReport, owner: Callable[[str], str] | None
) -> None:
    with client.pipeline(transaction=False) as pipe:
        for key in batch:
            pipe.memory_usage(key, samples=0)
            pipe.object("idletime", key)
        replies = pipe.execute()
    for key, used, idle in zip(batch, replies[0::2], replies[1::2]):
        name = keys.family_of(key)
        if name is None or used is None:  # gone since the scan
            continue
        family = report.families.setdefault(name, FamilyMemory())
        family.keys += 1
        family.bytes += int(used)
        family.oldest_idle_s = max(family.oldest_idle_s, int(idle or 0))
        if owner is not None:
            whose = owner(key)
            report.by_owner[whose] = report.by_owner.get(whose, 0) + int(used)
