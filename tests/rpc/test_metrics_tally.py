"""Assemble's series, counted in plain numbers (workers.rpc.metrics.AssembleTally), read as
Prometheus reads them: cumulative buckets, counts, sums and the hit ratio."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.config import Settings
from workers.rpc.metrics import RpcMetrics


def samples(metrics: RpcMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


@pytest.mark.parametrize(
    ("latencies", "le", "expected"),
    [
        ([0.0001], "0.0005", 1),  # below the first bound
        ([0.0005], "0.0005", 1),  # on a bound: that bucket (le is <=)
        ([0.00051], "0.0005", 0),
        ([0.00051], "0.001", 1),
        ([0.0002, 0.004, 0.2], "0.005", 2),
        ([0.0002, 0.004, 0.2], "0.25", 3),
        ([60.0], "10.0", 0),
        ([60.0], "+Inf", 1),
    ],
)
def test_latency_buckets_are_cumulative(latencies: list[float], le: str, expected: int) -> None:
    metrics = RpcMetrics(None, Settings())
    for seconds in latencies:
        metrics.assembled("full", "assembled", seconds)
    got = samples(metrics)
    assert got[("ovstream_assemble_seconds_bucket", (("le", le), ("path", "full")))] == expected
    assert got[("ovstream_assemble_seconds_count", (("path", "full"),))] == len(latencies)
    assert got[("ovstream_assemble_seconds_sum", (("path", "full"),))] == pytest.approx(sum(latencies))


def test_results_hits_and_recalls_by_label() -> None:
    metrics = RpcMetrics(None, Settings())
    for path, reason in [("full", "assembled"), ("full", "assembled"), ("full", "lag_overlay"), ("recall", "x")]:
        metrics.assembled(path, reason, 0.001)
    for _ in range(3):
        metrics.snapshot_hit()
    metrics.snapshot_miss()
    metrics.recall_turn(kept=True)
    metrics.recall_turn(kept=False)
    metrics.recall_turn(kept=False)
    got = samples(metrics)
    assert got[("ovstream_assemble_results_total", (("path", "full"), ("reason", "assembled")))] == 2
    assert got[("ovstream_assemble_results_total", (("path", "full"), ("reason", "lag_overlay")))] == 1
    assert got[("ovstream_assemble_results_total", (("path", "recall"), ("reason", "x")))] == 1
    assert got[("ovstream_assemble_seconds_count", (("path", "recall"),))] == 1
    assert got[("ovstream_snapshot_hits_total", ())] == 3
    assert got[("ovstream_snapshot_misses_total", ())] == 1
    assert got[("ovstream_snapshot_hit_ratio", ())] == 0.75
    assert got[("ovstream_recall_turn_cache_total", (("result", "hit"),))] == 1
    assert got[("ovstream_recall_turn_cache_total", (("result", "miss"),))] == 2


def test_before_any_assemble_the_counters_read_zero() -> None:
    got = samples(RpcMetrics(None, Settings()))
    assert got[("ovstream_snapshot_hits_total", ())] == 0
    assert got[("ovstream_snapshot_hit_ratio", ())] == 0
    assert got[("ovstream_recall_turn_cache_total", (("result", "miss"),))] == 0
    assert not any(name.startswith("ovstream_assemble_seconds") for name, _ in got)
