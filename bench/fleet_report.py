"""What the fleet bench (bench/fleet.py) prints at the end and draws (bench/fleet.png): per
kind of process its CPU per 1,000 turns, OV requests per turn, the latencies' p99, RQ jobs per
commit, Redis memory for the sessions alive against what they need, and each process's RSS."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet_chart import draw  # bench/fleet_chart.py
from fleet_day import HOURS, Hourly, Session, p99  # bench/fleet_day.py

from core.events import CommitOutcome, decode
from workers.commits.records import OUTCOME_FIELD
from workers.store.connection import stream_entries
from workers.store.keys import Keys

if TYPE_CHECKING:
    from fleet import Fleet


def outcomes(fleet: Fleet) -> list[CommitOutcome]:
    entries = stream_entries(fleet.store.xrange(Keys(fleet.prefix).commit_outcomes()))
    return [decode(fields[OUTCOME_FIELD.encode()], CommitOutcome) for _, fields in entries]


def report(
    args: argparse.Namespace,
    fleet: Fleet,
    sessions: list[Session],
    hours: list[Hourly],
    samples: list[dict[str, Any]],
    turns: int,
    started: float,
    started_wall: float,
) -> None:
    done = [o for o in outcomes(fleet) if o.finished_at and o.requested_at]
    for o in done:  # each commit's latency in the simulated hour it was asked for
        hour = int((o.requested_at - started_wall) * fleet.compression // 3600)
        hours[min(max(hour, 0), len(hours) - 1)].commit_ms.append((o.finished_at - o.requested_at) * 1000)  # type: ignore[operator]
    commits = [v for h in hours for v in h.commit_ms]
    jobs = sum(1 for _ in fleet.queue_client.scan_iter(match="rq:job:*", count=1000))
    last = samples[-1]
    print()
    print(
        f"fleet: {args.days} day(s), {len(sessions):,} sessions, {args.agents:,} agents, {args.tenants} tenants, "
        f"{turns:,} turns run in {time.monotonic() - started:.0f} s ({fleet.compression:.0f}x), "
        f"state kept {fleet.alive_s / 3600:.1f} simulated h"
    )
    for kind, seconds in sorted(last["cpu"].items()):
        print(f"  CPU s per 1,000 turns, {kind:<8} {seconds / max(1, turns) * 1000:8.2f}")
    print(f"  OV requests per turn          {last['ov_requests'] / max(1, turns):8.2f}")
    snap = [v for h in hours for v in h.snapshot_ms]
    asm = [v for h in hours for v in h.assemble_ms]
    print(f"  XADD -> snapshot p99 ms       {p99(snap):8.1f}  ({len(snap)} turns watched)")
    print(f"  assemble p99 ms               {p99(asm):8.1f}  ({len(asm)} calls)")
    print(f"  commit latency p99 ms         {p99(commits):8.1f}  ({len(commits)} commits)")
    print(f"  RQ jobs per commit            {jobs / max(1, len(commits)):8.2f}  (RQ keeps a job's result 500 s)")
    for s in samples:
        if s is last or s["hour"] % HOURS == 0:
            total, owners = sum(s["memory"].values()), s["owners"]
            need, gone = owners.get("alive", 0) + owners.get("deployment", 0), owners.get("gone", 0)
            print(
                f"  hour {s['hour']:5.1f}: Redis {total / 1e6:6.2f} MB for {s['alive']:,} sessions alive, they need "
                f"{need / 1e6:6.2f} MB ({total / max(1, need):.2f}x; sessions gone {gone / 1e6:.2f} MB)"
            )
    peak = max(sum(s["memory"].values()) for s in samples)
    print(f"  Redis memory: peak {peak / 1e6:.2f} MB, end {sum(last['memory'].values()) / 1e6:.2f} MB")
    rss = {name: [s["rss"][name] for s in samples if name in s["rss"]] for name in last["rss"]}
    print(
        "  RSS MiB, first hour -> end (peak): "
        + ", ".join(f"{n} {v[0] / 2**20:.0f} -> {v[-1] / 2**20:.0f} ({max(v) / 2**20:.0f})" for n, v in rss.items())
    )
    out = Path(__file__).with_name("fleet.json")
    hourly = [
        {
            "turns": h.turns,
            "commit_p99_ms": p99(h.commit_ms),
            "snapshot_p99_ms": p99(h.snapshot_ms),
            "assemble_p99_ms": p99(h.assemble_ms),
        }
        for h in hours
    ]
    out.write_text(json.dumps({"args": vars(args), "turns": turns, "samples": samples, "hours": hourly}, indent=1))
    draw(args, turns, hourly, samples, Path(__file__).with_name("fleet.png"))
