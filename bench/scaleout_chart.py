"""Draws the scale-out benches' rows (JSON lines from ``--json`` of bench/capture_scaleout.py,
bench/commit_scaleout.py and bench/rpc_scaleout.py) as one PNG: throughput against
processes (as x one, beside the line of perfect scaling) and each unit's cost against
processes (CPU and Redis commands per event, commit or request, as x one: flat is what
lets a bigger machine scale until Redis or OV saturate; the band is +-20%).

    .venv/bin/python bench/scaleout_chart.py scaleout.jsonl [--out bench/scaleout.png]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CPU = {"capture": "capture_cpu_ms", "commits": "worker_cpu_ms", "rpc": "rpc_cpu_us"}
"""Each bench's CPU per unit of work."""


def series_name(row: dict[str, Any]) -> str:
    cap = f", {row['cpu_cap_percent']:g}% CPU each" if row.get("cpu_cap_percent") else ""
    if row["bench"] == "capture":
        return f"capture, {row['workload']}, OV {row['ov_latency_ms']:g} ms{cap}"
    if row["bench"] == "commits":
        return f"commit workers, OV {row['ov_latency_ms']:g} ms, slow phase 2{cap}"
    return f"RPC assemble{cap}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("scaleout.png"))
    args = parser.parse_args()
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in args.rows.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            series[series_name(row)].append(row)
    fig, (speed, cost) = plt.subplots(1, 2, figsize=(14, 6))
    counts = sorted({r["processes"] for rows in series.values() for r in rows})
    speed.plot(counts, counts, color="grey", linestyle=":", label="perfect scaling")
    cost.axhspan(0.8, 1.2, color="grey", alpha=0.15, label="one process's cost +-20%")
    for name, rows in series.items():
        rows.sort(key=lambda r: r["processes"])
        procs = [r["processes"] for r in rows]
        (line,) = speed.plot(procs, [r["ratio"] for r in rows], marker="o", label=name)
        cpu = [r[CPU[r["bench"]]] for r in rows]
        cost.plot(procs, [c / cpu[0] for c in cpu], marker="o", color=line.get_color(), label=f"{name}: CPU")
        if "redis_commands" in rows[0]:
            commands = [r["redis_commands"] for r in rows]
            cost.plot(
                procs,
                [c / commands[0] for c in commands],
                marker="s",
                linestyle="--",
                color=line.get_color(),
                label=f"{name}: Redis commands",
            )
    speed.set(xlabel="processes", ylabel="throughput, x one process", title="Throughput against processes")
    cost.set(xlabel="processes", ylabel="per unit of work, x one process", title="Cost per event / commit / request")
    cost.set_ylim(0, max(2.0, cost.get_ylim()[1]))
    for ax in (speed, cost):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, labels=[str(n) for n in counts])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("ovstream scale-out on one 2-core machine (bench/RESULTS.md has the commands)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
