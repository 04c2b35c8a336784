"""The deployment's series, read from Redis when ``/metrics`` is scraped (workers.rpc.metrics):
stream lag, commit outcomes and jobs, dead letters, lost extractions and their repairs, the
processes, and what was masked (redactions). Each describes the whole deployment (every capture
worker, every commit), not just the process scraped.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Iterator
from itertools import accumulate

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from core.config import Settings
from core.usage import top_tenants
from workers.commits.api import job_counts, outcome_statuses_after, read_lost_extractions
from workers.status import oldest_in_flight, read_backlog
from workers.store.connection import REDIS_ERRORS, text
from workers.store.dead_letters import dead_letter_summary
from workers.store.health import read_health
from workers.store.keys import Keys
from workers.store.usage import read_usage

log = logging.getLogger(__name__)

_COMMIT_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""A commit takes seconds (phase 1) to minutes (phase 2's memory extraction)."""
_COMMIT_BUCKET_LABELS = [floatToGoString(b) for b in _COMMIT_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]

_OUTCOME_SCAN_BATCH = 1000
_OUTCOME_SCAN_MAX_PER_SCRAPE = 20_000
"""Bound on commit-outcome entries read per scrape, so a scrape stays cheap; the rest next time."""


class StreamLagCollector(Collector):
    """Per shard (workers.status): entries the capture group has not read yet,
    entries read but not yet acknowledged, the stream's length, and how long its oldest
    unapplied entry has waited (the number to alert on: it grows while capture or OV is away)."""

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "ovstream_stream_lag", "Turn events not yet delivered to the capture group", labels=["shard"]
        )
        pending = GaugeMetricFamily(
            "ovstream_stream_pending", "Turn events delivered but not yet acknowledged", labels=["shard"]
        )
        length = GaugeMetricFamily(
            "ovstream_stream_length",
            "Entries in the turn stream (unapplied, and applied not yet trimmed)",
            labels=["shard"],
        )
        oldest = GaugeMetricFamily(
            "ovstream_stream_oldest_unapplied_seconds",
            "Age of the oldest turn event not yet applied to OV (0 when capture is caught up)",
            labels=["shard"],
        )
        try:
            shards = read_backlog(self._redis, self._settings)
        except REDIS_ERRORS as exc:
            log.warning("metrics: cannot read the turn streams: %s", exc)
            return
        now_ms = int(time.time() * 1000)
        for s in shards:
            label = [s.name or str(s.shard)]
            if s.unread is not None:  # None: Redis cannot tell (entries deleted by hand)
                lag.add_metric(label, float(s.unread))
            pending.add_metric(label, float(s.pending))
            length.add_metric(label, float(s.length))
            oldest.add_metric(label, s.oldest_age_s(now_ms))
        yield from (lag, pending, length, oldest)


class DeadLetterCollector(Collector):
    """The dead letters waiting for an operator, the age of the oldest, and how many expired
    unhandled (``deadLetterMaxAgeS``): a growing count or age is a turn nobody looked at."""

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            summary = dead_letter_summary(self._redis, self._settings)
        except REDIS_ERRORS as exc:
            log.warning("metrics: cannot read the dead letters: %s", exc)
            return
        age = 0.0 if summary.oldest_ms is None else max(0.0, time.time() - summary.oldest_ms / 1000)
        yield GaugeMetricFamily("ovstream_dead_letters", "Dead letters waiting (ovstream dlq)", value=summary.count)
        yield GaugeMetricFamily(
            "ovstream_dead_letter_oldest_seconds", "Age of the oldest dead letter (0: none)", value=age
        )
        yield CounterMetricFamily(
            "ovstream_dead_letters_expired",
            "Dead letters dropped unhandled past deadLetterMaxAgeS",
            value=summary.expired,
        )


class LostExtractionCollector(Collector):
    """Phase 2s whose memories OV's merge of one user's overlapping extractions lost, as their
    repairs showed (workers.commits.repair), and the repairs by state: a growing count is a
    model losing those merges."""

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            lost = read_lost_extractions(self._redis, self._settings, newest=0)
        except REDIS_ERRORS as exc:
            log.warning("metrics: cannot read the lost extractions: %s", exc)
            return
        yield CounterMetricFamily(
            "ovstream_extractions_lost",
            "Phase 2s whose memories OV's merge lost (their repair, alone, wrote them)",
            value=lost.lost_total,
        )
        repairs = GaugeMetricFamily(
            "ovstream_extraction_repairs",
            "Listed re-extractions of phase 2s that wrote no memory beside another of their user, by state",
            labels=["state"],
        )
        for state, count in lost.repairs.items():
            repairs.add_metric([state], float(count))
        yield repairs
        yield CounterMetricFamily(
            "ovstream_extraction_repairs_started",
            "Repair commits started, each one more phase 2 (a model call): its rate is what the safety net costs",
            value=lost.repairs_started,
        )
        yield GaugeMetricFamily(
            "ovstream_extraction_suspects_waiting",
            "Suspected lost extractions waiting for their user's repair (extractionRepairsPerHour)",
            value=lost.suspects_waiting,
        )


class CommitOutcomeCollector(Collector):
    """Commit outcomes by status, tallied from the ``commit-outcomes`` stream.

    The stream is read incrementally: each scrape continues after the last
    entry the previous scrape saw, so the cost per scrape is the new entries.
    """

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings
        self._last_id: str | None = None
        self._tally: Tally[str] = Tally()
        self._took = [0.0] * (len(_COMMIT_BUCKETS) + 2)
        """Final outcomes per bucket of ``_COMMIT_BUCKETS`` (the last +Inf), then their seconds."""

    def _catch_up(self) -> None:
        read = 0
        while read < _OUTCOME_SCAN_MAX_PER_SCRAPE:
            entries = outcome_statuses_after(self._redis, self._settings, self._last_id, _OUTCOME_SCAN_BATCH)
            if not entries:
                return
            for entry_id, status, took_s in entries:
                self._tally[status] += 1
                self._last_id = entry_id
                if took_s is not None:
                    self._took[bisect_left(_COMMIT_BUCKETS, took_s)] += 1
                    self._took[-1] += took_s
            read += len(entries)
            if len(entries) < _OUTCOME_SCAN_BATCH:
                return

    def collect(self) -> Iterator[Metric]:
        try:
            self._catch_up()
        except REDIS_ERRORS as exc:
            log.warning("metrics: cannot read commit outcomes: %s", exc)
        family = CounterMetricFamily(
            "ovstream_commit_outcomes", "Commit outcomes recorded, by status", labels=["status"]
        )
        for status, count in sorted(self._tally.items()):
            family.add_metric([status], float(count))
        yield family
        *per_bucket, total = self._took
        took = HistogramMetricFamily(
            "ovstream_commit_seconds", "Seconds from a commit's request to its final outcome (phase 2 included)"
        )
        took.add_metric([], list(zip(_COMMIT_BUCKET_LABELS, accumulate(per_bucket), strict=True)), total)
        yield took


class DeploymentCollector(Collector):
    """Whether this RPC reaches Redis, the deployment's processes by role and state
    (workers.store.health: ``stale`` ones stopped beating), and capture's reads per shard
    (a counter: its rate is the capture rate)."""

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("ovstream_redis_up", "1 when this RPC reached Redis at the scrape, else 0")
        try:
            processes = read_health(self._redis, self._settings)
            shards = read_backlog(self._redis, self._settings)
            oldest_s, _ = oldest_in_flight(self._redis, self._settings, time.time())
            jobs = job_counts(self._redis, self._settings)
        except REDIS_ERRORS as exc:
            log.warning("metrics: Redis unreachable: %s", exc)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        counts = Tally((p.role, p.state) for p in processes)
        family = GaugeMetricFamily(
            "ovstream_processes", "ovstream processes heard of, by role and state", labels=["role", "state"]
        )
        for role in ("capture", "worker"):
            for state in ("ok", "degraded", "stale"):
                family.add_metric([role, state], float(counts.get((role, state), 0)))
        yield family
        read = CounterMetricFamily(
            "ovstream_capture_entries_read", "Turn events the capture group read, per shard", labels=["shard"]
        )
        for s in shards:
            if s.entries_read is not None:
                read.add_metric([s.name or str(s.shard)], float(s.entries_read))
        yield read
        yield GaugeMetricFamily(
            "ovstream_commit_oldest_in_flight_seconds",
            "Seconds since the oldest commit in flight was asked for (0: none); past phase2DeadlineS it is stuck",
            value=oldest_s,
        )
        by_state = GaugeMetricFamily(
            "ovstream_commit_jobs",
            "Commit queue jobs by state (failed: given up after retries; polling: phase-2 reads waiting)",
            labels=["state"],
        )
        for state, count in jobs.items():
            by_state.add_metric([state], float(count))
        yield by_state


class RedactionCollector(Collector):
    """Values capture wrote to OV masked (core.redaction), by tenant and kind: never a value."""

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            counts = self._redis.hgetall(Keys(self._settings.key_prefix).redactions())
        except REDIS_ERRORS as exc:
            log.warning("metrics: cannot read the redaction counts: %s", exc)
            return
        family = CounterMetricFamily(
            "ovstream_redactions", "Values written to OV masked, by tenant and kind", labels=["tenant", "kind"]
        )
        for field, count in sorted((text(f), int(c)) for f, c in counts.items()):
            tenant, _, kind = field.rpartition("|")
            family.add_metric([tenant, kind], count)
        yield family


class UsageCollector(Collector):
    """Today's usage per tenant (core.usage; UTC day), the ``usageMetricsTenants`` busiest by
    name and the rest as one ``(other)`` series: bounded however many tenants there are."""

    def __init__(self, redis_client: redis.Redis, settings: Settings) -> None:
        self._redis = redis_client
        self._settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            [today] = read_usage(self._redis, self._settings, "day", 1).values()
        except REDIS_ERRORS as exc:
            log.warning("metrics: cannot read the usage: %s", exc)
            return
        family = GaugeMetricFamily(
            "ovstream_tenant_usage_today",
            "What each tenant used today (UTC), by count (core.usage); the busiest by name, the rest as (other)",
            labels=["tenant", "count"],
        )
        for tenant, counts in top_tenants(today, self._settings.usage_metrics_tenants).items():
            for name, value in sorted(counts.items()):
                family.add_metric([tenant, name], float(value))
        yield family


DEPLOYMENT_COLLECTORS = (
    StreamLagCollector,
    CommitOutcomeCollector,
    DeadLetterCollector,
    LostExtractionCollector,
    DeploymentCollector,
    RedactionCollector,
    UsageCollector,
)
