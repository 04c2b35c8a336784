"""Prometheus metrics of the RPC service, in a registry of its own per app.

A per-app ``CollectorRegistry`` keeps two apps in one process (tests, ``ovstream
up``) from sharing or clashing on series. Stream lag and commit outcomes are
read from Redis when ``/metrics`` is scraped, so they describe the whole
deployment (every capture worker, every commit), not just this process.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from itertools import accumulate

import redis
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from core.config import Settings
from workers.commits.api import job_counts, outcome_statuses_after, read_lost_extractions
from workers.status import oldest_in_flight, read_backlog
from workers.store.connection import REDIS_ERRORS
from workers.store.dead_letters import dead_letter_summary
from workers.store.health import read_health

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Assemble answers in about a millisecond from a snapshot; the OV-backed paths
# take tens to thousands. Buckets cover both ends.
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

_COMMIT_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""A commit takes seconds (phase 1) to minutes (phase 2's memory extraction)."""
_COMMIT_BUCKET_LABELS = [floatToGoString(b) for b in _COMMIT_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]

_BUCKET_LABELS = [floatToGoString(b) for b in _LATENCY_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]
"""Each bucket's ``le`` as Prometheus writes it."""

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
            "ovstream_commit_jobs", "Commit queue jobs by state (failed: given up after retries)", labels=["state"]
        )
        for state, count in jobs.items():
            by_state.add_metric([state], float(count))
        yield by_state


class BreakerCollector(Collector):
    """Whether this RPC's OV breaker is open (OV found unreachable a moment ago: assemble
    passes through without trying it)."""

    def __init__(self, is_open: Callable[[], bool]) -> None:
        self._is_open = is_open

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "ovstream_ov_breaker_open",
            "1 while assemble skips OV after finding it unreachable",
            value=float(self._is_open()),
        )


class AssembleTally(Collector):
    """Assemble's per-call series, counted in plain numbers and made into metric families
    when scraped.

    prometheus_client's Counter and Histogram take a lock on every increment; on a
    snapshot hit, assemble's five increments cost about a sixth of its answer
    (bench/RESULTS.md, "The RPC against its floor"). Assemble counts on the RPC's one
    event loop, so plain integers do; a scrape from another thread reads them whole
    (a copy of a list is one step under the GIL).
    """

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], int] = {}
        """(path, reason) -> answers"""
        self.latency: dict[str, list[float]] = {}
        """path -> answers per bucket of ``_LATENCY_BUCKETS`` (not cumulative; the last is
        +Inf), then the sum of their seconds"""
        self.hits = 0
        self.misses = 0
        self.recalls_kept = 0
        self.recalls_searched = 0

    def collect(self) -> Iterator[Metric]:
        seconds = HistogramMetricFamily("ovstream_assemble_seconds", "Assemble latency by path", labels=["path"])
        for path, counts in sorted(self.latency.items()):
            *per_bucket, total = list(counts)
            seconds.add_metric([path], list(zip(_BUCKET_LABELS, accumulate(per_bucket), strict=True)), total)
        results = CounterMetricFamily(
            "ovstream_assemble_results", "Assemble answers by path and reason", labels=["path", "reason"]
        )
        for (path, reason), count in sorted(self.results.items()):
            results.add_metric([path, reason], count)
        recalls = CounterMetricFamily(
            "ovstream_recall_turn_cache",
            "Main-call recalls answered from the turn's kept block (hit) or searched (miss)",
            labels=["result"],
        )
        recalls.add_metric(["hit"], self.recalls_kept)
        recalls.add_metric(["miss"], self.recalls_searched)
        hits, misses = self.hits, self.misses
        yield from (seconds, results, recalls)
        yield CounterMetricFamily(
            "ovstream_snapshot_hits", "Full-context assembles answered from the cached snapshot", value=hits
        )
        yield CounterMetricFamily(
            "ovstream_snapshot_misses", "Full-context assembles that had to fetch OV /context", value=misses
        )
        yield GaugeMetricFamily(
            "ovstream_snapshot_hit_ratio",
            "Snapshot hits / (hits + misses) since start; 0 before the first assemble",
            value=hits / (hits + misses) if hits + misses else 0.0,
        )


class RpcMetrics:
    """Every series the RPC exposes, bound to one registry."""

    def __init__(self, redis_client: redis.Redis | None, settings: Settings) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.unauthorized = Counter(
            "ovstream_rpc_unauthorized", "Requests refused for a missing or wrong RPC token", ["reason"], registry=r
        )
        self.lag_overlays = Counter(
            "ovstream_lag_overlays",
            "Assembles that appended turns the snapshot had not captured yet",
            registry=r,
        )
        self.recall_timeouts = Counter(
            "ovstream_recall_timeouts", "Auto-recall searches abandoned after recall_timeout_s", registry=r
        )
        self.ov_unavailable = Counter(
            "ovstream_ov_unavailable",
            "Requests that found OpenViking unreachable, by operation",
            ["op"],
            registry=r,
        )
        self.compact_results = Counter("ovstream_compact_results", "Compact answers by reason", ["reason"], registry=r)
        self.tool_calls = Counter(
            "ovstream_tool_calls", "Tool calls by tool and outcome", ["tool", "outcome"], registry=r
        )
        self.tally = AssembleTally()
        r.register(self.tally)
        if redis_client is not None:
            r.register(StreamLagCollector(redis_client, settings))
            r.register(CommitOutcomeCollector(redis_client, settings))
            r.register(DeadLetterCollector(redis_client, settings))
            r.register(LostExtractionCollector(redis_client, settings))
            r.register(DeploymentCollector(redis_client, settings))

    def watch_breaker(self, is_open: Callable[[], bool]) -> None:
        """Report the OV breaker (``ovstream_ov_breaker_open``) as ``is_open`` says."""
        self.registry.register(BreakerCollector(is_open))

    def assembled(self, path: str, reason: str, seconds: float) -> None:
        """One assemble answer: its latency and its reason (paths and reasons are a small fixed set)."""
        tally = self.tally
        results, key = tally.results, (path, reason)
        results[key] = results.get(key, 0) + 1
        counts = tally.latency.get(path)
        if counts is None:
            counts = tally.latency[path] = [0.0] * (len(_LATENCY_BUCKETS) + 2)
        counts[bisect_left(_LATENCY_BUCKETS, seconds)] += 1  # the first bucket whose bound is >= seconds
        counts[-1] += seconds

    def snapshot_hit(self) -> None:
        self.tally.hits += 1

    def snapshot_miss(self) -> None:
        self.tally.misses += 1

    def recall_turn(self, *, kept: bool) -> None:
        """The main call's recall for its turn: the turn's kept block, or a search."""
        if kept:
            self.tally.recalls_kept += 1
        else:
            self.tally.recalls_searched += 1

    def render(self) -> bytes:
        return generate_latest(self.registry)
