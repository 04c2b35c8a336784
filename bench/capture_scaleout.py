"""Capture scale-out: throughput with 1, 2, 4 and 8 ``ovstream capture`` processes over 16 shards,
against an OV that takes ``--ov-latency-ms`` per call (the FakeOV over HTTP, ``ovstream fake-ov
--latency-ms``; several latencies, comma-separated), as ratios to one process, measured in one run.
Prints figures (``--json`` keeps them for bench/scaleout_chart.py); not a test.

Per row: a fresh key prefix and a fresh fake OV; the processes start and split the shards (with
``--cpu-cap PCT`` each in a cgroup of its own allowed PCT of one CPU, where this machine lets us:
capture's CPU then is the bottleneck, not the machine's two cores); then ``--sessions`` sessions
send ``--turns`` turns each, shaped by ``--workload``:

- ``waves`` (default): a shard's sessions send their next turns together (one pipeline) once the
  shard applied their last: one turn in flight per session, as in a fleet whose agents each
  wait for their answer; every process count sees the same rounds.
- ``backlog``: every turn published at once (one pipeline): the catch-up after an outage.
- ``trickle``: published one at a time as fast as this process can (the first version): a
  round holds what arrived since the last, so faster consumers make smaller rounds.

The clock runs from the first publish until every shard's backlog is applied. Per event, over that
window: capture's CPU seconds (/proc), Redis commands (``INFO commandstats``, less the bench's own
publishes and polls) and Redis's CPU, OV requests and the fake OV's CPU; and shards acquired after
the clock started (hand-overs per minute: 0 when the split holds).

    .venv/bin/python bench/capture_scaleout.py [--ov-latency-ms 250,20,0] [--workload waves]
        [--sessions 400] [--turns 10] [--processes 1,2,4,8] [--cpu-cap 25] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from processes import (  # bench/processes.py
    OVSTREAM,
    CpuSplit,
    acquisitions,
    append_rows,
    fake_ov_requests,
    group_cpu_seconds,
    must_cap,
    ovstream_env,
    pool_errors,
    redis_calls,
    redis_cpu_seconds,
    spawn,
    stop,
    uncap,
    wait_http,
    work_dir,
)

from core.config import Settings
from core.events import TurnEvent
from core.session import SessionAddress
from workers.dev.local_redis import free_port, start_redis_server
from workers.status import ShardBacklog, read_backlog
from workers.store.applied import parse_id
from workers.store.connection import text
from workers.store.keys import Keys
from workers.store.scripts import PUBLISH_TURN, SNAPSHOT_BEHIND
from workers.store.shard_map import read_shard_map
from workers.store.snapshots import snapshot_key
from workers.store.streams import publish_call, publish_turn

SHARDS = 16
WORKLOADS = ("waves", "backlog", "trickle")


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


def publish_at_once(client: redis.Redis, settings: Settings, events: list[TurnEvent]) -> dict[str, str]:
    """``events`` in one pipeline of ``PUBLISH_TURN`` (what ``publish_turn`` runs for one);
    the stream id of each session's last."""
    shard_map = read_shard_map(client, settings)
    with client.pipeline(transaction=False) as pipe:
        for event in events:
            PUBLISH_TURN(pipe, *publish_call(settings, shard_map, event))
        replies = pipe.execute()
    if any(int(published) != 1 for published, _ in replies):
        raise RuntimeError("a publish found the shard map changed: no reshard runs in this bench")
    return {e.session_id: value.decode() for e, (_, value) in zip(events, replies, strict=True)}


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


def split(backlog: list[ShardBacklog], processes: int) -> bool:
    """Every shard owned, each of ``processes`` owners holding its equal share."""
    owners = Counter(s.owner for s in backlog)
    return None not in owners and len(owners) == processes and set(owners.values()) == {SHARDS // processes}


@dataclass
class OwnCalls:
    """Redis commands the bench itself runs, measured alone: subtracted from a row's count."""

    pipeline: int
    """A ``publish_at_once`` of no events (the shard map's read)."""
    per_event: int
    """Each event published (the script and what it calls)."""


@dataclass
class Row:
    bench: str
    workload: str
    ov_latency_ms: float
    cpu_cap_percent: float | None
    processes: int
    rate: float
    """Events per second."""
    ratio: float
    """``rate`` over one process's in the same run."""
    capture_cpu_ms: float
    """Per event, every capture process together."""
    redis_commands: float
    redis_cpu_ms: float
    """Per event, the bench's own publishes and polls included (a small share: see ``OwnCalls``)."""
    ov_requests: float
    ov_cpu_ms: float
    handovers_per_min: float
    complete: int
    pool_errors: int


class Publisher:
    """Publishes the run's turns as ``workload`` shapes them and waits until each stream
    applied them; counts its own Redis commands."""

    def __init__(self, client: redis.Redis, settings: Settings, args: argparse.Namespace) -> None:
        self.client, self.settings, self.args = client, settings, args
        self.own, self.last_ids = 0, dict[str, str]()
        shard_map = read_shard_map(client, settings)
        self.sessions = [f"s{i}" for i in range(args.sessions)]
        self.stream_of = {s: publish_call(settings, shard_map, turn(s, 0))[0][1] for s in self.sessions}
        self.streams: dict[str, list[str]] = {}  # stream -> its sessions
        for session, stream in self.stream_of.items():
            self.streams.setdefault(stream, []).append(session)
        self.published = dict.fromkeys(self.streams, "0-0")  # stream -> its newest id

    def _published(self, session: str, stream_id: str) -> None:
        self.last_ids[session] = stream_id
        stream = self.stream_of[session]
        self.published[stream] = max(self.published[stream], stream_id, key=parse_id)

    def publish(self, events: list[TurnEvent]) -> None:
        for session, stream_id in publish_at_once(self.client, self.settings, events).items():
            self._published(session, stream_id)
        self.own += self.args.own.pipeline + len(events) * self.args.own.per_event

    def applied(self, streams: list[str]) -> list[str]:
        """Those of ``streams`` whose capture group read and acknowledged all published."""
        with self.client.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.xinfo_groups(stream)
            replies = pipe.execute()
        self.own += len(streams)
        done = []
        for stream, groups in zip(streams, replies, strict=True):
            group = next(g for g in groups if text(g["name"]) == self.settings.consumer_group)
            read = parse_id(text(group["last-delivered-id"])) >= parse_id(self.published[stream])
            if read and int(group["pending"]) == 0:
                done.append(stream)
        return done

    def wait(self, streams: set[str], alive: list[subprocess.Popen[bytes]], work: Path) -> set[str]:
        """Until some of ``streams`` are applied: those."""
        while not (done := self.applied(sorted(streams))):
            if any(w.poll() is not None for w in alive):
                raise RuntimeError(f"a capture process exited; see {work}")
            time.sleep(0.005)
        return set(done)

    def run(self, alive: list[subprocess.Popen[bytes]], work: Path) -> None:
        turns = self.args.turns
        if self.args.workload == "waves":
            # a stream's sessions send their next turn once the stream applied their last
            sent = dict.fromkeys(self.streams, 0)
            ready, outstanding = set(self.streams), set[str]()
            while ready or outstanding:
                if ready:
                    self.publish([turn(s, sent[stream]) for stream in ready for s in self.streams[stream]])
                    for stream in ready:
                        sent[stream] += 1
                    outstanding |= ready
                done = self.wait(outstanding, alive, work)
                outstanding -= done
                ready = {stream for stream in done if sent[stream] < turns}
            return
        if self.args.workload == "backlog":
            self.publish([turn(s, index) for index in range(turns) for s in self.sessions])
        else:
            for event in (turn(s, index) for index in range(turns) for s in self.sessions):
                self._published(event.session_id, publish_turn(self.client, self.settings, event))
                self.own += self.args.own.pipeline + self.args.own.per_event
        outstanding = set(self.streams)
        while outstanding:
            outstanding -= self.wait(outstanding, alive, work)


def measure(processes: int, latency_ms: float, args: argparse.Namespace, redis_url: str, work: Path) -> Row:
    """One row: ``processes`` capture processes against an OV taking ``latency_ms`` per call."""
    work = work / f"ov{latency_ms:g}ms-{processes}"  # each row's logs kept
    work.mkdir(parents=True, exist_ok=True)
    ov_port = free_port()
    prefix = f"scale{processes}x{uuid.uuid4().hex[:6]}"
    env = ovstream_env(
        {
            "OVSTREAM_REDIS_URL": redis_url,
            "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}",
            "OVSTREAM_KEY_PREFIX": prefix,
            "OVSTREAM_SHARDS": str(SHARDS),
            "OVSTREAM_COMMIT_TOKEN_THRESHOLD": "100000000",  # capture only: no commits
        }
    )
    fake_ov = [*OVSTREAM, "fake-ov", "--port", str(ov_port), "--latency-ms", str(latency_ms)]
    with args.cpus.system_side():
        ov = spawn(fake_ov, env, work / "ov.log")
    settings = Settings(redis_url=redis_url, key_prefix=prefix, shards=SHARDS)
    client = redis.Redis.from_url(redis_url)
    workers: list[subprocess.Popen[bytes]] = []
    groups: list[Path | None] = []
    try:
        wait_http(f"http://127.0.0.1:{ov_port}/health", 30)
        keys = Keys(prefix)
        for shard in range(SHARDS):
            client.xgroup_create(keys.stream(shard), settings.consumer_group, id="0", mkstream=True)
        logs = [work / f"capture{n}.log" for n in range(processes)]
        for n in range(processes):
            with args.cpus.system_side():
                workers.append(spawn([*OVSTREAM, "--log-level", args.log_level, "capture"], env, logs[n]))
            if args.cpu_cap:
                groups.append(must_cap(workers[-1].pid, args.cpu_cap, f"ovstream-bench-{os.getpid()}-{n}"))
        # The clock starts once every process owns its share of the shards: what is measured
        # is capture, not Python starting up or the shards being split.
        deadline = time.monotonic() + 60
        while not split(read_backlog(client, settings), processes):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                raise RuntimeError(f"the capture processes did not split the shards; see {work}")
            time.sleep(0.05)
        offsets = [log.stat().st_size for log in logs]
        cpu0, ov_cpu0 = sum(group_cpu_seconds(w.pid) for w in workers), group_cpu_seconds(ov.pid)
        calls0, ov0, redis_cpu0 = redis_calls(client), fake_ov_requests(ov_port), redis_cpu_seconds(client)
        publisher = Publisher(client, settings, args)
        started = time.monotonic()
        publisher.run(workers, work)
        elapsed = time.monotonic() - started
        n = args.sessions * args.turns
        cpu = sum(group_cpu_seconds(w.pid) for w in workers) - cpu0
        commands = (redis_calls(client) - calls0 - publisher.own - 2) / n  # 2: the INFOs before
        redis_cpu = redis_cpu_seconds(client) - redis_cpu0
        ov_cpu, requests = group_cpu_seconds(ov.pid) - ov_cpu0, (fake_ov_requests(ov_port) - ov0) / n
        handovers = acquisitions(logs, offsets)
        time.sleep(1.0)  # the last round's snapshot writes follow its ack
        return Row(
            bench="capture",
            workload=args.workload,
            ov_latency_ms=latency_ms,
            cpu_cap_percent=args.cpu_cap,
            processes=processes,
            rate=n / elapsed,
            ratio=0.0,  # set once the one-process row of this latency is known
            capture_cpu_ms=cpu / n * 1000,
            redis_commands=commands,
            redis_cpu_ms=redis_cpu / n * 1000,
            ov_requests=requests,
            ov_cpu_ms=ov_cpu / n * 1000,
            handovers_per_min=handovers / elapsed * 60,
            complete=snapshots_complete(client, settings, publisher.last_ids),
            pool_errors=pool_errors(logs),
        )
    finally:
        for proc in [*workers, ov]:
            stop(proc)
        for group in groups:
            uncap(group)
        client.close()


def own_calls(client: redis.Redis, redis_url: str) -> OwnCalls:
    """Redis commands of the bench's publishes and backlog polls, measured alone."""
    settings = Settings(redis_url=redis_url, key_prefix="calls", shards=SHARDS)
    for shard in range(SHARDS):  # the streams as a run has them
        client.xgroup_create(Keys("calls").stream(shard), settings.consumer_group, id="0", mkstream=True)

    def count(action: object) -> int:
        before = redis_calls(client)
        action()  # type: ignore[operator]
        return redis_calls(client) - before - 1  # 1: the INFO before

    one = count(lambda: publish_at_once(client, settings, [turn("calls", 0)]))
    two = count(lambda: publish_at_once(client, settings, [turn("calls", 1), turn("calls", 2)]))
    for key in client.scan_iter(match="calls:*"):
        client.delete(key)
    return OwnCalls(pipeline=2 * one - two, per_event=two - one)


def print_rows(rows: list[Row], args: argparse.Namespace) -> None:
    cap = f", each process capped at {args.cpu_cap:g}% of a CPU" if args.cpu_cap else ""
    print(
        f"capture scale-out, workload {args.workload}: {args.sessions} sessions x {args.turns} turns"
        f" (2 messages each), {SHARDS} shards, {os.cpu_count()} CPUs{cap}"
    )
    print(
        f"{'OV ms':>6} {'procs':>5} {'events/s':>9} {'x one':>6} {'capture CPU ms/event':>20}"
        f" {'Redis cmds/event':>16} {'Redis CPU ms/event':>18} {'OV reqs/event':>13} {'OV CPU ms/event':>15}"
        f" {'hand-overs/min':>14}"
        f" {'snapshots':>9} {'pool errs':>9}"
    )
    for r in rows:
        print(
            f"{r.ov_latency_ms:>6g} {r.processes:>5} {r.rate:>9,.0f} {r.ratio:>6.2f} {r.capture_cpu_ms:>20.3f}"
            f" {r.redis_commands:>16.2f} {r.redis_cpu_ms:>18.3f} {r.ov_requests:>13.2f} {r.ov_cpu_ms:>15.3f}"
            f" {r.handovers_per_min:>14.1f}"
            f" {f'{r.complete}/{args.sessions}':>9} {r.pool_errors:>9}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--turns", type=int, default=10, help="per session")
    parser.add_argument("--ov-latency-ms", default="20", help="comma-separated: a row set per latency")
    parser.add_argument("--workload", choices=WORKLOADS, default="waves")
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--cpu-cap", type=float, default=None, help="percent of one CPU per capture process")
    parser.add_argument("--json", type=Path, default=None, help="append each row here (JSON lines)")
    parser.add_argument("--log-level", default="INFO", help="of the capture processes (INFO: hand-overs counted)")
    parser.add_argument(
        "--load-cpu",
        type=int,
        default=None,
        help="run this bench's publisher on this CPU alone, Redis, OV and capture on the others",
    )
    args = parser.parse_args()
    args.cpus = CpuSplit(args.load_cpu)
    work = work_dir("scaleout")
    counts = [int(n) for n in args.processes.split(",")]
    rows: list[Row] = []
    server = start_redis_server()
    try:
        probe = redis.Redis.from_url(server.url)
        args.own = own_calls(probe, server.url)
        probe.close()
        for latency in (float(ms) for ms in args.ov_latency_ms.split(",")):
            these = [measure(n, latency, args, server.url, work) for n in counts]
            for row in these:
                row.ratio = row.rate / these[0].rate
            rows += these
    finally:
        server.stop()
    print_rows(rows, args)
    if args.json is not None:
        append_rows(args.json, rows)


if __name__ == "__main__":
    main()
