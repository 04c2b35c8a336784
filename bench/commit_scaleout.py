"""Commit workers scale-out: commits per second with 1, 2, 4 and 8 ``ovstream worker``
processes, as ratios to one, measured in one run. Prints figures (``--json`` keeps them for
bench/scaleout_chart.py); not a test.

Per row: a fresh key prefix, a fresh fake OV over HTTP (``ovstream fake-ov``) in API-key
mode with ``--tenants`` users, each call answering after ``--ov-latency-ms`` and each
commit's phase 2 answering "running" to its first ``--phase2-reads`` task reads (a slow phase
2, polled every ``--poll-s``); ``--commits`` sessions spread over the tenants, each holding a
few messages in OV. The workers start and register; then every session asks for a commit at
once (``request_commit``, as capture does at the threshold) and the clock runs until every
commit has its final outcome. Per commit: the workers' CPU (/proc), Redis commands (``INFO
commandstats``: the request, RQ's bookkeeping and the polls; the bench's own reads, one XREAD
of the outcome stream each, counted and left out) and Redis's CPU, OV requests. With ``--cpu-cap PCT`` each worker
runs in a cgroup of its own allowed PCT of one CPU (where this machine lets us).

    .venv/bin/python bench/commit_scaleout.py [--commits 200] [--tenants 20] [--ov-latency-ms 50]
        [--phase2-reads 3] [--poll-s 0.2] [--processes 1,2,4,8] [--cpu-cap 10] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import redis
from processes import (  # bench/processes.py
    OVSTREAM,
    RedisMonitor,
    append_rows,
    fake_ov_requests,
    group_cpu_seconds,
    must_cap,
    ovstream_env,
    redis_calls_by_command,
    redis_cpu_seconds,
    redis_reads,
    redis_usec_by_command,
    spawn,
    stop,
    uncap,
    wait_http,
    work_dir,
)
from rq import Worker

from core.config import Settings
from core.events import CommitOutcome, decode
from core.session import SessionAddress
from workers.commits.api import FINAL_STATUSES, request_commit
from workers.commits.queue import commit_queue
from workers.commits.records import OUTCOME_FIELD
from workers.dev.local_redis import free_port, start_redis_server
from workers.store.keys import Keys


@dataclass
class Row:
    bench: str
    ov_latency_ms: float
    cpu_cap_percent: float | None
    processes: int
    rate: float
    """Commits per second, each to its final outcome."""
    ratio: float
    worker_cpu_ms: float
    """Per commit, every worker process together."""
    redis_commands: float
    redis_round_trips: float
    """Per commit: requests Redis read (``INFO stats``; the bench's own reads left out)."""
    redis_cpu_ms: float
    ov_requests: float
    statuses: str
    by_command: dict[str, float]
    """Per commit, each command's calls (``--breakdown``), the bench's own reads left out."""
    usec_by_command: dict[str, float]
    """Per commit, each command's microseconds of Redis CPU (``--breakdown``; EVALSHA's include
    its script's own calls, also counted under theirs)."""
    by_key: dict[str, float]
    """Per commit, the commands on each key family (``--by-key``: MONITOR, the bench's reads in)."""


def tenant_keys(tenants: int) -> dict[str, str]:
    return {f"t{i}": f"key-{i}" for i in range(tenants)}


def seed(ov_url: str, keys: dict[str, str], sessions: list[SessionAddress]) -> None:
    """A user and an assistant message in each session, written as its tenant."""
    with httpx.Client(base_url=ov_url, timeout=30) as client:
        for address in sessions:
            messages = [
                {"role": "user", "content": f"{address.ov_session_id}: remember that I like tea " * 4},
                {"role": "assistant", "content": "Noted."},
            ]
            client.post(
                f"/api/v1/sessions/{address.ov_session_id}/messages/batch",
                json={"messages": messages},
                headers={"X-API-Key": keys[address.tenant or ""]},
            ).raise_for_status()


def measure(processes: int, args: argparse.Namespace, redis_url: str, work: Path) -> Row:
    work = work / f"{processes}"
    work.mkdir(parents=True, exist_ok=True)
    ov_port, prefix, keys = free_port(), f"commits{processes}x{uuid.uuid4().hex[:6]}", tenant_keys(args.tenants)
    env = ovstream_env(
        {
            "OVSTREAM_REDIS_URL": redis_url,
            "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}",
            "OVSTREAM_KEY_PREFIX": prefix,
            "OVSTREAM_USER_API_KEYS": json.dumps(keys),
            "OVSTREAM_PHASE2_POLL_INTERVAL_S": str(args.poll_s),
        }
    )
    api_keys = [a for tenant, key in keys.items() for a in ("--api-key", f"{key}=acct:{tenant}")]
    latency = ["--latency-ms", str(args.ov_latency_ms), "--phase2-reads", str(args.phase2_reads)]
    ov = spawn([*OVSTREAM, "fake-ov", "--port", str(ov_port), *latency, *api_keys], env, work / "ov.log")
    settings = Settings(redis_url=redis_url, key_prefix=prefix, user_api_keys=keys, phase2_poll_interval_s=args.poll_s)
    client = redis.Redis.from_url(redis_url)
    workers: list[subprocess.Popen[bytes]] = []
    groups: list[Path | None] = []
    try:
        wait_http(f"http://127.0.0.1:{ov_port}/health", 30)
        sessions = [SessionAddress(f"c{i}", "main", f"t{i % args.tenants}") for i in range(args.commits)]
        seed(f"http://127.0.0.1:{ov_port}", keys, sessions)
        for n in range(processes):
            workers.append(spawn([*OVSTREAM, "worker"], env, work / f"worker{n}.log"))
            if args.cpu_cap:
                groups.append(must_cap(workers[-1].pid, args.cpu_cap, f"ovstream-bench-{os.getpid()}-{n}"))
        queue = commit_queue(client, settings)
        deadline = time.monotonic() + 60
        while len(Worker.all(queue=queue)) < processes:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"the workers did not start; see {work}")
            time.sleep(0.05)
        cpu0, calls0 = sum(group_cpu_seconds(w.pid) for w in workers), redis_calls_by_command(client)
        usec0, reads0 = redis_usec_by_command(client), redis_reads(client)
        redis_cpu0, ov0 = redis_cpu_seconds(client), fake_ov_requests(ov_port)
        monitor = RedisMonitor(redis_url, prefix, args.trace) if args.by_key or args.trace else None
        started = time.monotonic()
        requests = [request_commit(client, settings, a, reason="manual", keep_recent_count=0) for a in sessions]
        # the final outcomes, from the outcome stream every final one is appended to: one XREAD
        # a batch, each counted (and left out of the commit's commands exactly)
        wanted = {r.commit_id for r in requests}
        outcomes: dict[str, CommitOutcome] = {}
        stream, last, reads = Keys(settings.key_prefix).commit_outcomes(), "0-0", 0
        while len(outcomes) < len(wanted):
            if any(w.poll() is not None for w in workers):
                raise RuntimeError(f"a worker exited; see {work}")
            reads += 1
            for _, entries in client.xread({stream: last}, count=1000, block=500) or []:
                for entry_id, fields in entries:
                    last = entry_id
                    outcome = decode(fields[OUTCOME_FIELD.encode()], CommitOutcome)
                    if outcome.commit_id in wanted and outcome.status in FINAL_STATUSES:
                        outcomes[outcome.commit_id] = outcome
        elapsed = time.monotonic() - started
        # the bench's own reads left out: its XREADs, its INFO cpu and this INFO stats
        round_trips = redis_reads(client) - reads0 - reads - 2
        families = monitor.close() if monitor is not None else {}
        n, calls1 = len(requests), redis_calls_by_command(client)
        by_command = {c: calls1[c] - calls0.get(c, 0) for c in calls1}
        by_command["info"] -= 5  # the bench's INFOs
        by_command["xread"] -= reads  # the request, RQ's bookkeeping, the polls; not the bench's reads
        commands = sum(by_command.values()) / n
        usec1 = redis_usec_by_command(client)
        usec = {c: (usec1[c] - usec0.get(c, 0)) / n for c in usec1 if c not in ("info", "xread")}
        return Row(
            bench="commits",
            ov_latency_ms=args.ov_latency_ms,
            cpu_cap_percent=args.cpu_cap,
            processes=processes,
            rate=n / elapsed,
            ratio=0.0,
            worker_cpu_ms=(sum(group_cpu_seconds(w.pid) for w in workers) - cpu0) / n * 1000,
            redis_commands=commands,
            redis_round_trips=round_trips / n,
            redis_cpu_ms=(redis_cpu_seconds(client) - redis_cpu0) / n * 1000,
            ov_requests=(fake_ov_requests(ov_port) - ov0) / n,
            statuses=",".join(sorted({o.status for o in outcomes.values()})),
            by_command={c: k / n for c, k in sorted(by_command.items(), key=lambda i: -i[1]) if k},
            by_key={f: k / n for f, k in sorted(families.items(), key=lambda i: -i[1])},
            usec_by_command=dict(sorted(usec.items(), key=lambda i: -i[1])),
        )
    finally:
        for proc in [*workers, ov]:
            stop(proc)
        for group in groups:
            uncap(group)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--ov-latency-ms", type=float, default=50.0)
    parser.add_argument("--phase2-reads", type=int, default=3)
    parser.add_argument("--poll-s", type=float, default=0.2, help="phase2PollIntervalS")
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--cpu-cap", type=float, default=None, help="percent of one CPU per worker process")
    parser.add_argument("--json", type=Path, default=None, help="append each row here (JSON lines)")
    parser.add_argument("--breakdown", action="store_true", help="each row's Redis commands a commit, by command")
    parser.add_argument(
        "--by-key", action="store_true", help="each row's commands a commit by key family (MONITOR: Redis slows)"
    )
    parser.add_argument(
        "--trace", type=Path, default=None, help="every Redis command, one a line, to this file (MONITOR)"
    )
    args = parser.parse_args()
    work = work_dir("commit-scaleout")
    server = start_redis_server()
    try:
        rows = [measure(int(n), args, server.url, work) for n in args.processes.split(",")]
    finally:
        server.stop()
    for row in rows:
        row.ratio = row.rate / rows[0].rate
    cap = f", each worker capped at {args.cpu_cap:g}% of a CPU" if args.cpu_cap else ""
    print(
        f"commit workers scale-out: {args.commits} commits of {args.tenants} tenants at once,"
        f" OV {args.ov_latency_ms:g} ms per call, phase 2 'running' to {args.phase2_reads} reads"
        f" polled every {args.poll_s:g} s,"
        f" {os.cpu_count()} CPUs{cap}"
    )
    print(
        f"{'workers':>7} {'commits/s':>9} {'x one':>6} {'worker CPU ms/commit':>20} {'Redis cmds/commit':>17}"
        f" {'round trips/commit':>18} {'Redis CPU ms/commit':>19} {'OV reqs/commit':>14} {'outcomes':>10}"
    )
    for r in rows:
        print(
            f"{r.processes:>7} {r.rate:>9.1f} {r.ratio:>6.2f} {r.worker_cpu_ms:>20.2f} {r.redis_commands:>17.1f}"
            f" {r.redis_round_trips:>18.1f} {r.redis_cpu_ms:>19.3f} {r.ov_requests:>14.2f} {r.statuses:>10}"
        )
    for r in rows if args.breakdown else []:
        said = ", ".join(f"{c} {k:.1f}" for c, k in r.by_command.items() if k >= 0.05)
        print(f"{r.processes} workers, Redis commands a commit by command: {said}")
        said = ", ".join(f"{c} {u:.0f}" for c, u in r.usec_by_command.items() if u >= 1)
        print(f"{r.processes} workers, Redis CPU us a commit by command (EVALSHA's with its script's): {said}")
    for r in rows if args.by_key else []:
        said = "\n  ".join(f"{k:6.1f}  {f}" for f, k in r.by_key.items() if k >= 0.05)
        print(f"{r.processes} workers, Redis commands a commit by key family (MONITOR on):\n  {said}")
    if args.json is not None:
        append_rows(args.json, rows)


if __name__ == "__main__":
    main()
