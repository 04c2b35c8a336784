"""The fleet bench's chart (bench/fleet.png): what a simulated day did, hour by hour.

Six panels over the simulated hours: sessions started, alive and expired beside the turns
run; Redis memory by key family on a log scale (the small families visible beside the
large) with what the sessions alive need; each process's RSS; latencies (XADD -> snapshot,
assemble, commit p99); CPU per 1,000 turns by kind of process and OV requests per turn, each
over the hour just past. Redrawn from bench/fleet.json alone: ``python bench/fleet_chart.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path
from typing import Any


def _per_hour(samples: list[dict[str, Any]], value: Any) -> list[float]:
    """``value(sample, previous)`` for each sample after the first."""
    return [value(s, p) for p, s in itertools.pairwise(samples)]


def draw(
    args: argparse.Namespace, turns: int, hourly: list[dict[str, Any]], samples: list[dict[str, Any]], out: Path
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (no chart: pip install matplotlib)")
        return
    fig, axes = plt.subplots(5, 1, figsize=(14, 18), sharex=True)
    xs = [s["hour"] for s in samples]
    sessions, load = axes[0], axes[0].twinx()
    load.bar(range(1, len(hourly) + 1), [h["turns"] for h in hourly], color="0.85", label="turns run per hour")
    load.set_ylabel("turns per simulated hour")
    sessions.set_zorder(load.get_zorder() + 1)
    sessions.patch.set_visible(False)
    for name, style in (("started", "-"), ("alive", "-"), ("expired", "--")):
        sessions.plot(xs, [s[name] for s in samples], style, label=f"sessions {name}")
    sessions.set_ylabel("sessions")
    sessions.legend(loc="upper left", fontsize=8)

    memory = axes[1]
    families = sorted(
        {f for s in samples for f in s["memory"]}, key=lambda f: -max(s["memory"].get(f, 0) for s in samples)
    )
    for family in families:  # a family with no key at a sample: a gap, not a dive to zero
        memory.plot(xs, [s["memory"].get(family, 0) / 1e6 or math.nan for s in samples], lw=1, label=family)
    total = [sum(s["memory"].values()) / 1e6 for s in samples]
    need = [(s["owners"].get("alive", 0) + s["owners"].get("deployment", 0)) / 1e6 for s in samples]
    memory.plot(xs, total, "k-", lw=2, label="all")
    memory.plot(xs, need, "k:", lw=2, label="what sessions alive + the deployment need")
    memory.set_yscale("log")
    memory.set_ylabel("Redis MB by key family (log)")
    memory.legend(loc="upper left", bbox_to_anchor=(1.01, 1.05), fontsize=6, ncol=2)

    rss = axes[2]
    for name in samples[-1]["rss"]:
        rss.plot(xs, [s["rss"].get(name, 0) / 2**20 for s in samples], label=name)
    rss.set_ylabel("RSS MiB")
    rss.set_ylim(bottom=0)
    rss.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    latency = axes[3]
    hours = range(1, len(hourly) + 1)
    for key, label in (
        ("snapshot_p99_ms", "XADD -> snapshot p99"),
        ("assemble_p99_ms", "assemble p99"),
        ("commit_p99_ms", "commit p99 (requested -> final)"),
    ):
        latency.plot(hours, [h[key] or math.nan for h in hourly], marker=".", label=label)  # gap: none that hour
    latency.set_yscale("log")
    latency.set_ylabel("ms (log)")
    latency.legend(loc="upper left", fontsize=8)

    cost, ov = axes[4], axes[4].twinx()
    turns_in = _per_hour(samples, lambda s, p: max(1, s["turns"] - p["turns"]))
    for kind in sorted(samples[-1]["cpu"]):
        per = _per_hour(samples, lambda s, p, k=kind: s["cpu"][k] - p["cpu"].get(k, 0.0))
        cost.plot(
            xs[1:], [c / t * 1000 for c, t in zip(per, turns_in, strict=True)], label=f"CPU s / 1,000 turns: {kind}"
        )
    requests = _per_hour(samples, lambda s, p: s["ov_requests"] - p["ov_requests"])
    ov.plot(xs[1:], [r / t for r, t in zip(requests, turns_in, strict=True)], "k--", label="OV requests per turn")
    ov.set_ylabel("OV requests per turn")
    cost.set_ylabel("CPU s per 1,000 turns")
    cost.set_yscale("log")
    cost.set_xlabel("simulated hour (each over the hour just past)")
    cost.legend(loc="upper left", fontsize=7)
    ov.legend(loc="upper right", fontsize=7)
    fig.suptitle(f"ovstream, {args.days} simulated day(s): {args.sessions * args.days:,} sessions, {turns:,} turns run")
    fig.subplots_adjust(left=0.07, right=0.72, top=0.96, bottom=0.04, hspace=0.18)
    fig.savefig(out, dpi=80)
    print(f"  chart: {out}")


def main() -> None:
    saved = json.loads(Path(__file__).with_name("fleet.json").read_text())
    draw(
        argparse.Namespace(**saved["args"]),
        saved["turns"],
        saved["hours"],
        saved["samples"],
        Path(__file__).with_name("fleet.png"),
    )


if __name__ == "__main__":
    main()
