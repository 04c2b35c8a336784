"""Prometheus metrics of the RPC service, in a registry of its own per app.

A per-app ``CollectorRegistry`` keeps two apps in one process (tests, ``ovstream
up``) from sharing or clashing on series. Stream lag and commit outcomes are
read from Redis when ``/metrics`` is scraped, so they describe the whole
deployment (every capture worker, every commit), not just this process.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate

import redis
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from core.config import Settings
from workers.rpc.deployment_metrics import DEPLOYMENT_COLLECTORS

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

_BUCKET_LABELS = [floatToGoString(b) for b in _LATENCY_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]
"""Each bucket's ``le`` as Prometheus writes it."""


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
            for collector in DEPLOYMENT_COLLECTORS:
                r.register(collector(redis_client, settings))

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
