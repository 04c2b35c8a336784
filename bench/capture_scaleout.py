"""Capture scale-out: throughput with 1, 2, 4 and 8 ``ovstream capture`` processes over 16
shards, against an OV that takes ``--ov-latency-ms`` per call (the FakeOV over HTTP,
``ovstream fake-ov --latency-ms``), as ratios to one process, measured in one run.
Prints figures; not a test.

Per run: a fresh key prefix and a fresh fake OV; the processes start and split the shards;
then ``--events`` turn events of ``--sessions`` sessions are published at once, and the
clock runs from the publish until every shard's backlog is applied. Per event, over that
window: capture's CPU seconds (all its processes, /proc), Redis commands (``INFO
commandstats``, less the bench's own publishes and polls, each measured alone first), OV
requests (the fake OV's count) and the fake OV's own CPU; and the shards acquired by a
process after the clock started (hand-overs: 0 when the split holds).

    .venv/bin/python bench/capture_scaleout.py [--events 4000] [--sessions 400] [--ov-latency-ms 20]
"""

from __future__ import annotations

import argparse
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
from processes import OVSTREAM, fake_ov_requests, group_cpu_seconds, spawn, stop  # bench/processes.py

from core.config import Settings
from core.events import TurnEvent
from core.session import SessionAddress
from workers.dev.local_redis import free_port, start_redis_server
from workers.status import read_backlog
from workers.store.applied import parse_id
from workers.store.keys import Keys
from workers.store.scripts import SNAPSHOT_BEHIND
from workers.store.snapshots import snapshot_key
from workers.store.streams import publish_turn

SHARDS = 16


def turn(session: str, index: int) -> TurnEvent:
    messages = [
        {"role": "user", "content": f"{session} question {index}: " + "words " * 30},
        {"role": "assistant", "content": [{"type": "text", "text": f"{session} answer {index}: " + "words " * 60}]},
    ]
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=messages,
        advancement_key=f"{session}:{index}",
        published_at=time.time(),
    )


POOL_ERRORS = ("Too many connections", "No connection available", "MaxConnectionsError")
"""What redis-py says when a process's connection pool is exhausted."""


def snapshots_complete(client: redis.Redis, settings: Settings, last_ids: dict[str, str]) -> int:
    """Sessions whose stored snapshot reflects their last published turn and is not behind
    what capture applied: what assemble serves as current is whole."""
    complete = 0
    for session, last_id in last_ids.items():
        key = snapshot_key(settings, SessionAddress(session, "main"))
        stored_id, behind = client.hmget(key, ["id", SNAPSHOT_BEHIND])
        if (
            stored_id is not None
            and stored_id.decode() == last_id
            and (behind is None or parse_id(behind.decode()) <= parse_id(last_id))
        ):
            complete += 1
    return complete


def pool_errors(logs: list[Path]) -> int:
    return sum(log.read_text(errors="replace").count(e) for log in logs for e in POOL_ERRORS)


def redis_calls(client: redis.Redis) -> int:
    """Commands Redis has run so far (every command's calls, ``INFO commandstats``)."""
    return sum(int(v["calls"]) for v in client.info("commandstats").values())


def acquisitions(logs: list[Path], offsets: list[int]) -> int:
    """Shards acquired (a lease taken) in each log since its byte ``offsets``."""
    return sum(log.read_bytes()[at:].count(b" acquired by ") for log, at in zip(logs, offsets, strict=True))


@dataclass
class Run:
    rate: float
    complete: int
    pool_errors: int
    capture_cpu_ms: float
    """Per event, every capture process together."""
    redis_commands: float
    ov_requests: float
    ov_cpu_ms: float
    handovers: int


def run(processes: int, args: argparse.Namespace, redis_url: str, work: Path) -> Run:
    """Events per second for ``processes`` capture processes, and what each event cost."""
    ov_port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}
    prefix = f"scale{processes}x{uuid.uuid4().hex[:6]}"
    env = {
        **base,
        "OVSTREAM_REDIS_URL": redis_url,
        "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}",
        "OVSTREAM_KEY_PREFIX": prefix,
        "OVSTREAM_SHARDS": str(SHARDS),
        "OVSTREAM_COMMIT_TOKEN_THRESHOLD": "100000000",  # capture only: no commits
    }
    ov = spawn(
        [*OVSTREAM, "fake-ov", "--port", str(ov_port), "--latency-ms", str(args.ov_latency_ms)], env, work / "ov.log"
    )
    settings = Settings(redis_url=redis_url, key_prefix=prefix, shards=SHARDS)
    client = redis.Redis.from_url(redis_url)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{ov_port}/health", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        keys = Keys(prefix)
        for shard in range(SHARDS):
            client.xgroup_create(keys.stream(shard), settings.consumer_group, id="0", mkstream=True)
        sessions = [f"s{i}" for i in range(args.sessions)]
        events = [turn(sessions[i % len(sessions)], i // len(sessions)) for i in range(args.events)]
        logs = [work / f"capture{n}.log" for n in range(processes)]
        for n in range(processes):
            workers.append(spawn([*OVSTREAM, "--log-level", args.log_level, "capture"], env, logs[n]))
        # The clock starts once every process owns its share of the shards: what is measured
        # is capture, not Python starting up or the shards being split.
        deadline = time.monotonic() + 60
        while len({s.owner for s in read_backlog(client, settings)} - {None}) < processes:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"the capture processes did not split the shards; see {work}")
            time.sleep(0.05)
        offsets = [log.stat().st_size for log in logs]
        cpu0, ov_cpu0 = sum(group_cpu_seconds(w.pid) for w in workers), group_cpu_seconds(ov.pid)
        calls0, ov0, polls = redis_calls(client), fake_ov_requests(ov_port), 0
        started = time.monotonic()
        last_ids = {event.session_id: publish_turn(client, settings, event) for event in events}
        while any(s.oldest_unapplied is not None for s in read_backlog(client, settings)):
            polls += 1
            if any(w.poll() is not None for w in workers):
                raise RuntimeError(f"a capture process exited; see {work}")
            time.sleep(0.05)
        rate = args.events / (time.monotonic() - started)
        n = args.events
        cpu = sum(group_cpu_seconds(w.pid) for w in workers) - cpu0
        ours = n * args.publish_calls + (polls + 1) * args.poll_calls + 1  # the bench's own, and INFO
        commands = (redis_calls(client) - calls0 - ours) / n
        ov_cpu, requests = group_cpu_seconds(ov.pid) - ov_cpu0, (fake_ov_requests(ov_port) - ov0) / n
        handovers = acquisitions(logs, offsets)
        time.sleep(1.0)  # the last round's snapshot writes follow its ack
        complete = snapshots_complete(client, settings, last_ids)
        return Run(rate, complete, pool_errors(logs), cpu / n * 1000, commands, requests, ov_cpu / n * 1000, handovers)
    finally:
        for proc in [*workers, ov]:
            stop(proc)
        client.close()


def own_calls(client: redis.Redis, redis_url: str) -> tuple[int, int]:
    """Redis commands of one publish and of one backlog poll, measured alone."""
    settings = Settings(redis_url=redis_url, key_prefix="calls", shards=SHARDS)
    for shard in range(SHARDS):  # the streams as a run has them
        client.xgroup_create(Keys("calls").stream(shard), settings.consumer_group, id="0", mkstream=True)
    before = redis_calls(client)
    publish_turn(client, settings, turn("calls", 0))
    publish = redis_calls(client) - before - 1
    before = redis_calls(client)
    read_backlog(client, settings)
    poll = redis_calls(client) - before - 1
    for key in client.scan_iter(match="calls:*"):
        client.delete(key)
    return publish, poll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--ov-latency-ms", type=float, default=20.0)
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--log-level", default="INFO", help="of the capture processes (INFO: hand-overs counted)")
    args = parser.parse_args()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"ovstream-scaleout-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    server = start_redis_server()
    try:
        probe = redis.Redis.from_url(server.url)
        args.publish_calls, args.poll_calls = own_calls(probe, server.url)
        probe.close()
        results = {int(n): run(int(n), args, server.url, work) for n in args.processes.split(",")}
    finally:
        server.stop()
    one = results[min(results)].rate
    print(
        f"capture scale-out: {args.events} turn events ({args.sessions} sessions, 2 messages each), {SHARDS} shards,"
        f" OV latency {args.ov_latency_ms:g} ms per call, {os.cpu_count()} CPUs"
    )
    print(
        f"{'processes':>9} {'events/s':>9} {'x one':>6} {'capture CPU ms/event':>20} {'Redis cmds/event':>16}"
        f" {'OV reqs/event':>13} {'OV CPU ms/event':>15} {'hand-overs':>10} {'snapshots':>9} {'pool errs':>9}"
    )
    for n, r in results.items():
        print(
            f"{n:>9} {r.rate:>9,.0f} {r.rate / one:>6.2f} {r.capture_cpu_ms:>20.3f} {r.redis_commands:>16.2f}"
            f" {r.ov_requests:>13.2f} {r.ov_cpu_ms:>15.3f} {r.handovers:>10} {f'{r.complete}/{args.sessions}':>9}"
            f" {r.pool_errors:>9}"
        )


if __name__ == "__main__":
    main()
