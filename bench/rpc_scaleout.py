"""RPC scale-out: assemble requests per second with 1, 2, 4 and 8 serving processes
(``ovstream rpc --workers N``), as ratios to one, measured in one run. Prints figures
(``--json`` keeps them for bench/scaleout_chart.py); not a test.

A machine of two cores shows nothing past two processes uncapped, so ``--cpu-cap PCT``
(default 10) puts each server in a cgroup allowed N x PCT of one CPU (the processes of one
server share their group's budget; where this machine lets us make none, the bench says so
and runs uncapped): the RPC's CPU is then the bottleneck, not the machine's, and wrk (C)
and Redis stay well inside the rest. Everything as in bench/rpc_floor.py: a redis-server, the
fake OV, a 200-message session captured first so every assemble is a snapshot hit, the
plugin's main call (its turns, the transcript counted), ``--clients`` keep-alive connections
for ``--seconds``; per row its req/s, p50, the server's CPU per request (/proc) and Redis's.

    .venv/bin/python bench/rpc_scaleout.py [--processes 1,2,4,8] [--cpu-cap 10] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from processes import (  # bench/processes.py
    OVSTREAM,
    append_rows,
    cap_cpu,
    redis_cpu_seconds,
    spawn,
    stop,
    uncap,
    wait_http,
    work_dir,
)
from rpc_floor import captured_session, conversation, load_wrk  # bench/rpc_floor.py

from workers.dev.local_redis import free_port, start_redis_server


@dataclass
class Row:
    bench: str
    cpu_cap_percent: float | None
    processes: int
    rate: float
    """Assemble requests per second."""
    ratio: float
    p50_ms: float
    rpc_cpu_us: float
    """Per request, every process of the server."""
    redis_cpu_us: float


def measure(processes: int, args: argparse.Namespace, env: dict[str, str], body: bytes, work: Path) -> Row:
    port = free_port()
    argv = [*OVSTREAM, "--log-level", "WARNING", "rpc", "--port", str(port), "--workers", str(processes)]
    server = spawn(argv, env, work / f"rpc{processes}.log")
    group = None
    try:
        if args.cpu_cap:  # before it forks its workers (Python starting up takes longer than this)
            group = cap_cpu(server.pid, args.cpu_cap * processes, f"ovstream-bench-{os.getpid()}-{processes}")
        wait_http(f"http://127.0.0.1:{port}/healthz")
        client = redis.Redis.from_url(env["OVSTREAM_REDIS_URL"])
        redis_cpu0 = redis_cpu_seconds(client)
        measured = load_wrk(port, body, args.clients, args.seconds, server.pid)
        requests = measured.rate * (args.seconds + 1)  # wrk's warm-up second too
        redis_us = (redis_cpu_seconds(client) - redis_cpu0) / requests * 1e6
        client.close()
        return Row(
            "rpc",
            args.cpu_cap if group else None,
            processes,
            measured.rate,
            0.0,
            measured.p50_ms,
            measured.cpu_us,
            redis_us,
        )
    finally:
        stop(server)
        uncap(group)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--cpu-cap", type=float, default=10.0, help="percent of one CPU per process; 0: uncapped")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None, help="append each row here (JSON lines)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk generates the load: apt install wrk")
    work = work_dir("rpc-scaleout")
    server = start_redis_server()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        messages = conversation(args.messages)
        env = captured_session(server.url, messages, work, procs)
        fields = {
            "sessionId": "bench",
            "messageCount": len(messages),
            "prompt": "next",
            "heldTurns": [],
            "recentTurns": [],
        }
        body = json.dumps(fields).encode()
        rows = [measure(int(n), args, env, body, work) for n in args.processes.split(",")]
    finally:
        for proc in procs:
            stop(proc)
        server.stop()
    for row in rows:
        row.ratio = row.rate / rows[0].rate
    capped = rows[0].cpu_cap_percent
    cap = f"each process capped at {capped:g}% of a CPU" if capped else "uncapped (no cgroup could be made)"
    print(
        f"RPC scale-out: the plugin's assemble of a {args.messages}-message session (snapshot hits), {args.clients}"
        f" keep-alive clients from wrk, {args.seconds:g} s per row, {os.cpu_count()} CPUs, {cap}"
    )
    print(f"{'processes':>9} {'req/s':>8} {'x one':>6} {'p50 ms':>7} {'RPC CPU us/req':>14} {'Redis CPU us/req':>16}")
    for r in rows:
        print(
            f"{r.processes:>9} {r.rate:>8,.0f} {r.ratio:>6.2f} {r.p50_ms:>7.2f} {r.rpc_cpu_us:>14.0f}"
            f" {r.redis_cpu_us:>16.1f}"
        )
    if args.json is not None:
        append_rows(args.json, rows)


if __name__ == "__main__":
    main()
