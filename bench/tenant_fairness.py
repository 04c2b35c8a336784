"""One tenant's burst of commits beside another tenant's live ones (issue 58): tenant B's
commit latency alone, then beside tenant A's burst, and the ratio, measured in one run.
Prints figures (``--json`` keeps them); not a test.

A real redis-server, ``--workers`` ``ovstream worker`` processes, and the fake OV over HTTP
(``ovstream fake-ov``) answering each call after ``--ov-latency-ms`` and each phase 2
"running" to its first ``--phase2-reads`` task reads (polled every ``--poll-s``). Every
session holds a few messages in OV. B asks for ``--live`` commits one after another (``compact``,
what a person waits on: asked for, then waited on to its final outcome), first alone, then
again just after A asked for ``--burst`` commits at once (background: the threshold's, as a
bulk import makes them). Latency: from the request to the final outcome, phase 2 included.
A's commits are waited on to their final outcome too (nothing lost to the lines).

    .venv/bin/python bench/tenant_fairness.py [--burst 1000] [--live 40] [--workers 4]
        [--ov-latency-ms 50] [--phase2-reads 2] [--poll-s 0.2] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from commit_scaleout import seed  # bench/commit_scaleout.py
from processes import OVSTREAM, append_rows, ovstream_env, spawn, stop, wait_http, work_dir  # bench/processes.py
from rq import Worker

from core.config import Settings
from core.events import CommitReason, CommitRequest
from core.session import SessionAddress
from workers.commits.api import FINAL_STATUSES, CommitRecords, commit_queue, request_commit
from workers.dev.local_redis import free_port, start_redis_server

KEYS = {"tenant-a": "key-a", "tenant-b": "key-b"}


@dataclass
class Row:
    bench: str
    workers: int
    burst: int
    live: int
    ov_latency_ms: float
    b_p50_alone_s: float
    b_p99_alone_s: float
    b_p50_beside_s: float
    b_p99_beside_s: float
    ratio: float
    """B's p99 beside A's burst over B's p99 alone."""
    a_left_when_b_done: int
    """A's commits not yet final when B's last one was: the burst still ran beside B throughout."""
    a_seconds: float
    statuses: str


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


class Bench:
    def __init__(self, args: argparse.Namespace, redis_url: str, work: Path) -> None:
        self.args, self.work = args, work
        self.ov_port, prefix = free_port(), f"fair{uuid.uuid4().hex[:6]}"
        self.env = ovstream_env(
            {
                "OVSTREAM_REDIS_URL": redis_url,
                "OVSTREAM_BASE_URL": f"http://127.0.0.1:{self.ov_port}",
                "OVSTREAM_KEY_PREFIX": prefix,
                "OVSTREAM_USER_API_KEYS": json.dumps(KEYS),
                "OVSTREAM_PHASE2_POLL_INTERVAL_S": str(args.poll_s),
            }
        )
        self.settings = Settings(
            redis_url=redis_url, key_prefix=prefix, user_api_keys=KEYS, phase2_poll_interval_s=args.poll_s
        )
        self.client = redis.Redis.from_url(redis_url)
        self.records = CommitRecords(self.client, self.settings)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        api_keys = [a for tenant, key in KEYS.items() for a in ("--api-key", f"{key}=acct:{tenant}")]
        latency = ["--latency-ms", str(self.args.ov_latency_ms), "--phase2-reads", str(self.args.phase2_reads)]
        ov = [*OVSTREAM, "fake-ov", "--port", str(self.ov_port), *latency, *api_keys]
        self.procs.append(spawn(ov, self.env, self.work / "ov.log"))
        wait_http(f"http://127.0.0.1:{self.ov_port}/health", 30)
        for n in range(self.args.workers):
            self.procs.append(spawn([*OVSTREAM, "worker"], self.env, self.work / f"worker{n}.log"))
        queue, deadline = commit_queue(self.client, self.settings), time.monotonic() + 60
        while len(Worker.all(queue=queue)) < self.args.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"the workers did not start; see {self.work}")
            time.sleep(0.05)

    def seeded(self, tenant: str, count: int, round_: str) -> list[SessionAddress]:
        sessions = [SessionAddress(f"{tenant}-{round_}-{i}", "main", tenant) for i in range(count)]
        chunks = [sessions[i : i + 20] for i in range(0, count, 20)]
        with ThreadPoolExecutor(16) as pool:  # OV answers each after its latency: side by side
            list(pool.map(lambda chunk: seed(f"http://127.0.0.1:{self.ov_port}", KEYS, chunk), chunks))
        return sessions

    def final(self, request: CommitRequest) -> str | None:
        outcome = self.records.outcome(request)
        return outcome.status if outcome is not None and outcome.status in FINAL_STATUSES else None

    def ask(self, address: SessionAddress, reason: CommitReason) -> CommitRequest:
        return request_commit(self.client, self.settings, address, reason=reason, keep_recent_count=0)

    def live_commits(self, sessions: list[SessionAddress]) -> tuple[list[float], list[str]]:
        """B's commits one after another, each waited on: their latencies and outcomes."""
        latencies, statuses = [], []
        for address in sessions:
            started = time.monotonic()
            request = self.ask(address, "compact")
            deadline = started + 300
            while (status := self.final(request)) is None:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    raise RuntimeError(f"commit {request.commit_id} not final; see {self.work}")
                time.sleep(0.01)
            latencies.append(time.monotonic() - started)
            statuses.append(status)
        return latencies, statuses

    def run(self) -> Row:
        args = self.args
        b_alone_sessions = self.seeded("tenant-b", args.live, "alone")
        b_beside_sessions = self.seeded("tenant-b", args.live, "beside")
        a_sessions = self.seeded("tenant-a", args.burst, "burst")
        alone, alone_statuses = self.live_commits(b_alone_sessions)
        burst_started = time.monotonic()
        a_requests = [self.ask(address, "threshold") for address in a_sessions]
        beside, beside_statuses = self.live_commits(b_beside_sessions)
        a_left = sum(1 for r in a_requests if self.final(r) is None)
        a_statuses = []
        pending = list(a_requests)
        deadline = time.monotonic() + 900
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} of A's commits not final; see {self.work}")
            time.sleep(0.2)
            still = []
            for request in pending:
                status = self.final(request)
                (a_statuses.append(status) if status else still.append(request))
            pending = still
        statuses = sorted({*alone_statuses, *beside_statuses, *a_statuses})
        return Row(
            bench="tenant_fairness",
            workers=args.workers,
            burst=args.burst,
            live=args.live,
            ov_latency_ms=args.ov_latency_ms,
            b_p50_alone_s=statistics.median(alone),
            b_p99_alone_s=p99(alone),
            b_p50_beside_s=statistics.median(beside),
            b_p99_beside_s=p99(beside),
            ratio=p99(beside) / p99(alone),
            a_left_when_b_done=a_left,
            a_seconds=time.monotonic() - burst_started,
            statuses=",".join(statuses),
        )

    def close(self) -> None:
        for proc in self.procs:
            stop(proc)
        self.client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=1000, help="A's commits, asked for at once")
    parser.add_argument("--live", type=int, default=40, help="B's commits, one after another")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ov-latency-ms", type=float, default=50.0)
    parser.add_argument("--phase2-reads", type=int, default=2)
    parser.add_argument("--poll-s", type=float, default=0.2, help="phase2PollIntervalS")
    parser.add_argument("--json", type=Path, default=None, help="append the row here (JSON lines)")
    args = parser.parse_args()
    server = start_redis_server()
    bench = Bench(args, server.url, work_dir("tenant-fairness"))
    try:
        bench.start()
        row = bench.run()
    finally:
        bench.close()
        server.stop()
    print(
        f"tenant fairness: {args.workers} commit workers, OV {args.ov_latency_ms:g} ms per call, phase 2"
        f" 'running' to {args.phase2_reads} reads polled every {args.poll_s:g} s, {os.cpu_count()} CPUs;"
        f" A asks for {args.burst} commits at once, B for {args.live} compacts one after another"
    )
    print(
        f"B p50 alone {row.b_p50_alone_s:.2f} s, beside A's burst {row.b_p50_beside_s:.2f} s;"
        f" B p99 alone {row.b_p99_alone_s:.2f} s, beside A's burst {row.b_p99_beside_s:.2f} s, ratio {row.ratio:.2f}"
    )
    print(
        f"A's burst: {row.a_left_when_b_done} of {args.burst} commits not yet final when B's last was;"
        f" all final after {row.a_seconds:.1f} s; outcomes: {row.statuses}"
    )
    if args.json is not None:
        append_rows(args.json, [row])


if __name__ == "__main__":
    main()
