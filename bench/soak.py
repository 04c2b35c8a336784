"""A soak: one RPC, one capture process and one commit worker serving many distinct sessions,
each process's RSS sampled as the sessions pass and drawn (bench/soak.png); not a test.

Real processes on loopback: a redis-server, the fake OV over HTTP, ``ovstream rpc``,
``ovstream capture`` and ``ovstream worker``, the console's defaults on (every assemble
leaves its trace). Each session publishes its turns (commitTurn events, each carrying its
own turn) and asks the RPC to assemble after every one, with its whole transcript as the
host sends it. Most sessions are short (``--short-turns`` turns of 4 messages); every
``--long-every``-th grows to ``--long-messages`` messages in turns of 20 (a tool loop).
``--commit-tokens`` is low enough that every session commits (the worker sees each one).
RSS (the process group's, /proc) is read every ``--every`` sessions, each time once capture
and the commit queue have caught up (so a sample measures the sessions served, not a backlog
held), and once more at the end.

    .venv/bin/python bench/soak.py [--sessions 20000] [--every 1000] [--long-every 100] [--long-messages 500]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import redis
from processes import OVSTREAM, group_rss_bytes, ovstream_env, spawn, stop, wait_http, work_dir  # bench/processes.py
from rq import Queue

from core.config import Settings
from core.events import TurnEvent
from workers.commits.queue import commit_lines
from workers.dev.local_redis import free_port, start_redis_server
from workers.store.keys import Keys
from workers.store.streams import publish_turn

ROLES = ("rpc", "capture", "worker")


def turn_messages(session: str, turn: int, size: int) -> list[dict[str, Any]]:
    """One turn of ``size`` messages: a user message, tool calls and results, an answer."""
    out: list[dict[str, Any]] = [
        {"role": "user", "content": f"{session} turn {turn}: " + "what changed in the release notes today? " * 6}
    ]
    for k in range((size - 2) // 2):
        call = f"c{turn}-{k}"
        out.append(
            {"role": "assistant", "content": [{"type": "toolCall", "id": call, "name": "read", "arguments": {}}]}
        )
        out.append(
            {
                "role": "toolResult",
                "toolCallId": call,
                "toolName": "read",
                "content": [{"type": "text", "text": "release line\n" * 20}],
            }
        )
    out.append(
        {"role": "assistant", "content": [{"type": "text", "text": f"answer {turn}: " + "the notes say so. " * 12}]}
    )
    return out[:size]


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.procs = args, {}
        self.redis_server = start_redis_server()
        self.prefix = f"soak{uuid.uuid4().hex[:6]}"
        ov_port, self.rpc_port = free_port(), free_port()
        env = ovstream_env(
            {
                "OVSTREAM_REDIS_URL": self.redis_server.url,
                "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}",
                "OVSTREAM_KEY_PREFIX": self.prefix,
                "OVSTREAM_COMMIT_TOKEN_THRESHOLD": str(args.commit_tokens),
                "OVSTREAM_PHASE2_POLL_INTERVAL_S": "0.2",
            }
        )
        self.settings = Settings(redis_url=self.redis_server.url, key_prefix=self.prefix)
        try:
            self.ov = spawn([*OVSTREAM, "fake-ov", "--port", str(ov_port)], env, work / "ov.log")
            wait_http(f"http://127.0.0.1:{ov_port}/health")
            self.procs["rpc"] = spawn([*OVSTREAM, "rpc", "--port", str(self.rpc_port)], env, work / "rpc.log")
            self.procs["capture"] = spawn([*OVSTREAM, "capture"], env, work / "capture.log")
            self.procs["worker"] = spawn([*OVSTREAM, "worker"], env, work / "worker.log")
            wait_http(f"http://127.0.0.1:{self.rpc_port}/healthz")
        except BaseException:
            self.close()
            raise
        self.client = redis.Redis.from_url(self.redis_server.url)
        self.queue = Queue(self.settings.commit_queue_name, connection=self.client)
        self.lines = commit_lines(self.client, self.settings)

    def rss(self) -> dict[str, int]:
        return {role: group_rss_bytes(self.procs[role].pid) for role in ROLES}

    def backlog(self) -> tuple[int, int]:
        """(turns not yet applied, commit jobs queued or running)."""
        groups = 0
        for key in self.client.scan_iter(match=f"{self.prefix}:*:turns", count=1000):
            for group in self.client.xinfo_groups(key):
                groups += int(group.get("lag") or 0) + int(group.get("pending") or 0)
        return groups, self.lines.queued() + self.queue.started_job_registry.count

    def settle(self, at_most_s: float) -> None:
        """Until capture has applied every turn and the commit queue is empty (or ``at_most_s``)."""
        deadline = time.monotonic() + at_most_s
        while self.backlog() != (0, 0) and time.monotonic() < deadline:
            time.sleep(0.5)

    def close(self) -> None:
        for proc in [*self.procs.values(), getattr(self, "ov", None)]:
            if proc is not None:
                stop(proc)
        if hasattr(self, "client"):
            self.client.close()
        self.redis_server.stop()


def serve(soak: Soak, http: httpx.Client, n: int, failures: list[str]) -> None:
    """One session: its turns, an assemble after each."""
    args = soak.args
    sid = f"soak-{n:06d}"
    long = args.long_every and n % args.long_every == 0
    turns, size = (args.long_messages // 20, 20) if long else (args.short_turns, 4)
    transcript: list[dict[str, Any]] = []
    for turn in range(turns):
        new = turn_messages(sid, turn, size)
        event = TurnEvent(
            event_id=uuid.uuid4().hex,
            session_id=sid,
            session_key=f"agent:main:{sid}",
            messages=new,
            advancement_key=f"{sid}:{turn}",
            published_at=time.time(),
        )
        publish_turn(soak.client, soak.settings, event)
        transcript += new
        body = {"sessionId": sid, "sessionKey": f"agent:main:{sid}", "messages": transcript, "prompt": "next?"}
        r = http.post(f"http://127.0.0.1:{soak.rpc_port}/v1/assemble", json=body)
        if r.status_code >= 400:
            failures.append(f"{sid}: assemble answered {r.status_code}: {r.text[:200]}")


def run(args: argparse.Namespace) -> None:
    work = work_dir("soak")
    soak = Soak(args, work)
    samples: list[dict[str, Any]] = []
    failures: list[str] = []
    started = time.monotonic()
    try:
        limits = httpx.Limits(max_connections=args.callers)
        with httpx.Client(timeout=30, limits=limits) as http, ThreadPoolExecutor(args.callers) as pool:
            for first in range(0, args.sessions, args.every):
                last = min(args.sessions, first + args.every)
                list(pool.map(lambda n: serve(soak, http, n, failures), range(first, last)))
                soak.settle(args.settle_s)  # each sample at rest: memory per session served, not per backlog
                lag, jobs = soak.backlog()
                samples.append({"sessions": last, "rss": soak.rss(), "lag": lag, "jobs": jobs})
                print(
                    f"{last:>7,} sessions: "
                    + ", ".join(f"{r} {v / 2**20:6.1f} MiB" for r, v in samples[-1]["rss"].items())
                    + f"  (turns behind {lag:,}, commit jobs waiting {jobs:,})",
                    flush=True,
                )
        soak.settle(args.drain_s)
        lag, jobs = soak.backlog()
        samples.append({"sessions": args.sessions, "rss": soak.rss(), "lag": lag, "jobs": jobs, "drained": True})
        samples[-1]["commits"] = soak.client.xlen(Keys(soak.prefix).commit_outcomes())
        report(args, samples, failures, time.monotonic() - started)
    finally:
        soak.close()


def report(args: argparse.Namespace, samples: list[dict[str, Any]], failures: list[str], took: float) -> None:
    first, end = samples[0], samples[-1]
    print(f"\nsoak: {args.sessions:,} distinct sessions in {took:.0f} s; {len(failures)} assemble(s) refused or failed")
    for failure in failures[:3]:
        print(f"  {failure}")
    print(
        f"  drained: turns behind {end['lag']:,}, commit jobs waiting {end['jobs']:,}; "
        f"{end['commits']:,} commit outcomes recorded (the stream keeps its newest 10,000)"
    )
    for role in ROLES:
        a, b = first["rss"][role], end["rss"][role]
        peak = max(s["rss"][role] for s in samples)
        print(
            f"  {role:<8} RSS at {first['sessions']:,}: {a / 2**20:6.1f} MiB, "
            f"at {args.sessions:,}: {b / 2**20:6.1f} MiB (peak {peak / 2**20:.1f}): {b / a:.2f}x"
        )
    Path(__file__).with_name("soak.json").write_text(json.dumps({"args": vars(args), "samples": samples}, indent=1))
    draw(args, samples)


def draw(args: argparse.Namespace, samples: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (no chart: pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(9, 5))
    live = [s for s in samples if not s.get("drained")]
    for role in ROLES:
        line = ax.plot([s["sessions"] for s in live], [s["rss"][role] / 2**20 for s in live], marker=".", label=role)
        ax.plot([samples[-1]["sessions"]], [samples[-1]["rss"][role] / 2**20], "o", color=line[0].get_color())
    ax.set_xlabel("distinct sessions served (o: after the queues drained)")
    ax.set_ylabel("RSS MiB")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(
        f"ovstream soak: {args.sessions:,} sessions, every {args.long_every}th growing to {args.long_messages} messages"
    )
    out = Path(__file__).with_name("soak.png")
    fig.savefig(out, dpi=90)
    print(f"  chart: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=1000, help="sessions between RSS samples")
    parser.add_argument("--short-turns", type=int, default=2)
    parser.add_argument("--long-every", type=int, default=100, help="every n-th session is a long one (0: none)")
    parser.add_argument("--long-messages", type=int, default=500)
    parser.add_argument("--commit-tokens", type=int, default=200, help="commitTokenThreshold")
    parser.add_argument("--callers", type=int, default=8, help="sessions served at once")
    parser.add_argument("--settle-s", type=float, default=120.0, help="longest wait for the queues before a sample")
    parser.add_argument("--drain-s", type=float, default=900.0, help="longest wait for capture and commits at the end")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
