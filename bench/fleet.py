"""A simulated day of a fleet: sessions start along a day's arrival curve, talk, go idle and
expire, through real ovstream processes on a Redis Cluster. Prints figures per simulated
hour and draws them (bench/fleet.png); not a test.

Each day is compressed into ``--minutes`` of wall time (a simulated hour is a 24th of it),
``--days`` of them (two by default: the second day shows the plateau), and so is every
lifetime (``simulated_lifetimes``: each setting whose name ends ``_ttl_s`` or ``_max_age_s``,
its default capped at ``--state-ttl-hours``, on the simulated clock; tests/unit check that
none is left out), so sessions that ended expire within the run and Redis memory must level
off while new sessions keep coming. Processes: a 3-master Redis Cluster (the store) and a
plain Redis (the commit queue), ``--captures`` capture processes, ``--workers`` commit
workers, ``--rpcs`` RPC processes, and the fake OV over HTTP in API-key mode (one user key
per tenant) answering every call after 50-250 ms (``--ov-latency-ms``). The bench publishes
each session's turns (the whole transcript each, as afterTurn does), asks one of the RPCs
to assemble after a share of them, and samples every simulated hour:

- Redis memory by key family (workers.store.memory, over every master);
- CPU seconds per 1,000 turns of each kind of process (/proc);
- OV requests per turn (the fake OV's own count, ``GET /_stats``);
- XADD -> snapshot p99 (a sample of turns, until the session's snapshot holds them),
  assemble p99, commit latency p99 (requested -> final, from the outcome stream);
- RQ jobs per commit (jobs the queue Redis keeps / commits);
- sessions started, alive (a turn or commit within the state lifetime) and expired, and
  Redis memory held for sessions alive, for sessions gone (must be ~0) and for the
  deployment (streams, outcomes, process records);
- each process's RSS.

    .venv/bin/python bench/fleet.py [--sessions 2000] [--agents 300] [--tenants 10] [--turns 20000] [--days 2]
                                    [--minutes 5] [--state-ttl-hours 3] [--captures 4] [--workers 2] [--rpcs 2]

(``--sessions`` and ``--turns`` are per day.) The chart is drawn by bench/fleet_chart.py.

The issue's full day is ``--sessions 100000 --agents 2000 --tenants 50 --turns 1000000``:
more than two cores carry in ten minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import redis
from fleet_day import HOURS, SIM_DAY_S, Hourly, Session, next_turn, plan_sessions  # bench/fleet_day.py
from fleet_report import outcomes, report  # bench/fleet_report.py
from processes import (  # bench/processes.py
    OVSTREAM,
    fake_ov_requests,
    group_rss_bytes,
    ovstream_env,
    spawn,
    stop,
    wait_http,
    work_dir,
)
from redis.cluster import RedisCluster

from core.config import Settings
from core.events import TurnEvent
from core.turns import address_of
from workers.dev.local_redis import free_port, start_redis_cluster, start_redis_server
from workers.store.applied import parse_id
from workers.store.memory import read_memory
from workers.store.snapshots import snapshot_key
from workers.store.streams import publish_turn

NOT_IN_REDIS = {"missing_session_ttl_s": "an RPC's memory of OV's 'no such session': seconds, in process"}
"""Lifetime settings of nothing Redis keeps: not on the simulated clock."""


def lifetime_settings() -> list[str]:
    """Every setting that gives something kept in Redis its lifetime."""
    return [n for n in Settings.model_fields if n.endswith(("_ttl_s", "_max_age_s")) and n not in NOT_IN_REDIS]


def simulated_lifetimes(state_ttl_s: float, compression: float) -> dict[str, str]:
    """The environment putting every lifetime on the simulated clock: its default, at most
    ``state_ttl_s`` (simulated), compressed as the day is; at least 1 s and what the setting allows."""
    env = {}
    for name in lifetime_settings():
        info = Settings.model_fields[name]
        floor = max([1, *(int(m.ge) for m in info.metadata if getattr(m, "ge", None) is not None)])
        simulated = min(float(info.default), state_ttl_s)
        env[f"OVSTREAM_{name.upper()}"] = str(max(floor, math.ceil(simulated / compression)))
    return env


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its children that ended (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class Fleet:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.compression = SIM_DAY_S / (args.minutes * 60)
        self.procs: dict[str, list[Any]] = defaultdict(list)
        self.cluster = start_redis_cluster(3)
        self.queue = start_redis_server()
        try:
            self._start(args, work)
        except BaseException:
            self.close()
            raise

    def _start(self, args: argparse.Namespace, work: Path) -> None:
        self.prefix = f"fleet{uuid.uuid4().hex[:6]}"
        lifetimes = simulated_lifetimes(args.state_ttl_hours * 3600, self.compression)
        ttl_s = int(lifetimes["OVSTREAM_SESSION_STATE_TTL_S"])
        self.alive_s = max(ttl_s, int(lifetimes["OVSTREAM_SNAPSHOT_TTL_S"])) * self.compression
        """A session's keys outlive its last turn or commit by this much simulated time."""
        keys = {f"t{t}": f"key-t{t}" for t in range(args.tenants)}
        self.ov_port = free_port()
        self.env = ovstream_env(
            {
                "OVSTREAM_REDIS_URL": self.cluster.url,
                "OVSTREAM_REDIS_CLUSTER": "true",
                "OVSTREAM_QUEUE_REDIS_URL": self.queue.url,
                "OVSTREAM_BASE_URL": f"http://127.0.0.1:{self.ov_port}",
                "OVSTREAM_KEY_PREFIX": self.prefix,
                "OVSTREAM_SHARDS": "16",
                "OVSTREAM_USER_API_KEYS": json.dumps(keys),
                "OVSTREAM_API_KEY": "key-t0",
                "OVSTREAM_COMMIT_TOKEN_THRESHOLD": str(args.commit_tokens),
                **lifetimes,
                "OVSTREAM_PHASE2_POLL_INTERVAL_S": "0.5",
            }
        )
        self.settings = Settings(
            redis_url=self.cluster.url,
            redis_cluster=True,
            queue_redis_url=self.queue.url,
            key_prefix=self.prefix,
            shards=16,
            user_api_keys=keys,
            snapshot_ttl_s=ttl_s,
            session_state_ttl_s=ttl_s,
        )
        latency = f"{args.ov_latency_ms}"
        routes = ["add_messages", "get_context", "get_session", "commit", "get_task", "find", "read", "list_tasks"]
        ov_args = [*OVSTREAM, "fake-ov", "--port", str(self.ov_port)]
        ov_args += [a for r in routes for a in ("--route-latency-ms", f"{r}={latency}")]
        ov_args += [a for label, key in keys.items() for a in ("--api-key", f"{key}=fleet:{label}")]
        self.procs["ov"].append(spawn(ov_args, self.env, work / "ov.log"))
        wait_http(f"http://127.0.0.1:{self.ov_port}/health")
        self.rpc_ports = [free_port() for _ in range(args.rpcs)]
        for n, port in enumerate(self.rpc_ports):
            self.procs["rpc"].append(spawn([*OVSTREAM, "rpc", "--port", str(port)], self.env, work / f"rpc{n}.log"))
        for n in range(args.captures):
            self.procs["capture"].append(spawn([*OVSTREAM, "capture"], self.env, work / f"capture{n}.log"))
        for n in range(args.workers):
            self.procs["worker"].append(spawn([*OVSTREAM, "worker"], self.env, work / f"worker{n}.log"))
        for port in self.rpc_ports:
            wait_http(f"http://127.0.0.1:{port}/healthz")
        self.store = RedisCluster.from_url(self.cluster.url)
        self.queue_client = redis.Redis.from_url(self.queue.url)

    def cpu(self) -> dict[str, float]:
        return {kind: sum(cpu_seconds(p.pid) for p in procs) for kind, procs in self.procs.items()}

    def rss(self) -> dict[str, int]:
        """Each ovstream process's resident memory (its process group's), by name."""
        return {
            f"{kind}{n}": group_rss_bytes(p.pid)
            for kind in ("rpc", "capture", "worker")
            for n, p in enumerate(self.procs[kind])
        }

    def last_commits(self) -> dict[str, float]:
        """OV session id -> wall time its newest recorded commit finished (touching its state)."""
        out: dict[str, float] = {}
        for outcome in outcomes(self):
            if outcome.finished_at:
                out[outcome.ov_session_id] = max(out.get(outcome.ov_session_id, 0.0), outcome.finished_at)
        return out

    def ov_requests(self) -> int:
        return fake_ov_requests(self.ov_port)

    def sim_now(self, started: float) -> float:
        return (time.monotonic() - started) * self.compression

    def close(self) -> None:
        for procs in self.procs.values():
            for proc in procs:
                stop(proc)
        for client in (getattr(self, "store", None), getattr(self, "queue_client", None)):
            if client is not None:
                client.close()
        self.cluster.stop()
        self.queue.stop()


def snapshot_holds(store: RedisCluster, settings: Settings, event: TurnEvent, entry_id: str) -> bool:
    """Whether the session's stored snapshot reflects its stream entry ``entry_id``."""
    key = snapshot_key(settings, address_of(event, settings.agent_prefix))
    stored = store.hget(key, "id")
    return stored is not None and parse_id(stored.decode()) >= parse_id(entry_id)


class Census:
    """Which sessions have started, which are alive (their keys may be kept), which expired."""

    def __init__(self, fleet: Fleet, started_wall: float) -> None:
        self.fleet, self.started_wall = fleet, started_wall
        self.grace_s = GRACE_WALL_S * fleet.compression
        self.seen: dict[str, Session] = {}
        self.touched: dict[str, float] = {}

    def count(self, now_s: float, sessions: list[Session]) -> dict[str, int]:
        for session in sessions:
            if session.ov_session_id:
                self.seen[session.ov_session_id] = session
        for sid, wall in self.fleet.last_commits().items():
            self.touched[sid] = (wall - self.started_wall) * self.fleet.compression
        alive = sum(1 for sid in self.seen if self.alive(sid, now_s))
        return {"started": len(self.seen), "alive": alive, "expired": len(self.seen) - alive}

    def alive(self, ov_session_id: str, now_s: float) -> bool:
        session = self.seen[ov_session_id]
        touched = max(session.last_s, self.touched.get(ov_session_id, -math.inf))
        return touched + self.fleet.alive_s + self.grace_s > now_s

    def owner(self, now_s: float) -> Callable[[str], str]:
        """Whose a key is: ``alive``, ``gone`` (a session past its lifetime) or ``deployment``."""

        def of(key: str) -> str:
            for part in key.rsplit(":", 2)[-2:]:
                if part in self.seen:
                    return "alive" if self.alive(part, now_s) else "gone"
            return "deployment"

        return of


GRACE_WALL_S = 5.0
"""A session's keys may be written this long (wall time) after its last turn or commit."""


def run(args: argparse.Namespace) -> None:
    work = work_dir("fleet")
    rng = random.Random(args.seed)
    sessions = sorted(plan_sessions(args, rng), key=lambda s: s.start_s)
    fleet = Fleet(args, work)
    hours: list[Hourly] = [Hourly() for _ in range(HOURS * args.days)]
    samples: list[dict[str, Any]] = []
    watched: list[tuple[TurnEvent, str, float, int]] = []
    watched_lock = threading.Lock()
    stop_watch = threading.Event()
    http = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=16))
    callers = ThreadPoolExecutor(max_workers=8, thread_name_prefix="assemble")
    failures: list[str] = []

    def assemble(session: Session, transcript: list[dict[str, Any]], hour: int) -> None:
        port = fleet.rpc_ports[hash(session.sid) % len(fleet.rpc_ports)]
        body = {
            "sessionId": session.sid,
            "sessionKey": f"agent:{session.agent}:{session.sid}",
            "messages": transcript,
            "prompt": "next?",
        }
        t0 = time.monotonic()
        r = http.post(
            f"http://127.0.0.1:{port}/v1/assemble", json=body, headers={"X-OpenViking-API-Key": f"key-{session.tenant}"}
        )
        if r.status_code >= 500:
            failures.append(f"assemble answered {r.status_code}: {r.text[:300]}")
        hours[hour].assemble_ms.append((time.monotonic() - t0) * 1000)

    def watch_snapshots() -> None:  # XADD -> snapshot, for a sample of the turns
        while not stop_watch.is_set():
            with watched_lock:
                pending = list(watched)
            for item in pending:
                event, entry_id, sent_at, hour = item
                if snapshot_holds(fleet.store, fleet.settings, event, entry_id):
                    hours[hour].snapshot_ms.append((time.monotonic() - sent_at) * 1000)
                    with watched_lock:
                        watched.remove(item)
            time.sleep(0.02)

    def sample(hour: float, now_s: float, sent_total: int, active: int) -> None:
        counts = census.count(now_s, sessions)
        memory = read_memory(fleet.store, fleet.settings, sample=2_000_000, owner=census.owner(now_s))
        cpu = fleet.cpu()
        samples.append(
            {
                "hour": hour,
                "turns": sent_total,
                **counts,
                "memory": {k: v.bytes for k, v in memory.families.items()},
                "owners": memory.by_owner,
                "rss": fleet.rss(),
                "cpu": {k: cpu[k] - cpu0.get(k, 0.0) for k in cpu},
                "ov_requests": fleet.ov_requests() - ov0,
            }
        )
        h = samples[-1]
        print(
            f"hour {h['hour']:>5.1f}: {h['turns']:>7,} turns, redis {sum(h['memory'].values()) / 1e6:7.2f} MB "
            f"({h['owners'].get('gone', 0) / 1e6:.2f} of sessions gone), {counts['alive']:>5} sessions alive, "
            f"{active:>5} mid-conversation",
            flush=True,
        )

    watcher = threading.Thread(target=watch_snapshots, daemon=True)
    watcher.start()
    try:
        started, started_wall, next_sample_h = time.monotonic(), time.time(), 1
        census = Census(fleet, started_wall)
        active: list[Session] = []
        upcoming = list(sessions)
        sent_total, cpu0, ov0 = 0, fleet.cpu(), fleet.ov_requests()
        while upcoming or active:
            now_s = fleet.sim_now(started)
            hour = min(len(hours) - 1, int(now_s // 3600))
            while upcoming and upcoming[0].start_s <= now_s:
                active.append(upcoming.pop(0))
            for session in [s for s in active if s.due_s() <= now_s]:
                event = next_turn(session, now_s)
                if not session.ov_session_id:
                    session.ov_session_id = address_of(event, fleet.settings.agent_prefix).ov_session_id
                sent_at = time.monotonic()
                entry_id = publish_turn(fleet.store, fleet.settings, event)
                sent_total += 1
                hours[hour].turns += 1
                if sent_total % args.watch_every == 0:
                    with watched_lock:
                        watched.append((event, entry_id, sent_at, hour))
                if rng.random() < args.assemble_share:
                    callers.submit(assemble, session, list(session.transcript), hour)
                if session.sent >= session.turns:
                    active.remove(session)
            if now_s >= next_sample_h * 3600:
                sample(next_sample_h, now_s, sent_total, len(active))
                next_sample_h += 1
            time.sleep(0.005)
        callers.shutdown(wait=True)
        time.sleep(GRACE_WALL_S)  # the last turns' snapshots and commits
        now_s = fleet.sim_now(started)
        sample(now_s / 3600, now_s, sent_total, 0)
        stop_watch.set()
        if failures:
            raise SystemExit(f"{len(failures)} assemble(s) answered 5xx, the first: {failures[0]}")
        report(args, fleet, sessions, hours, samples, sent_total, started, started_wall)
    finally:
        stop_watch.set()
        callers.shutdown(wait=False, cancel_futures=True)
        http.close()
        fleet.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000, help="sessions a day")
    parser.add_argument("--agents", type=int, default=300)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--turns", type=int, default=20000, help="turns a day")
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=5.0, help="wall time of each simulated day")
    parser.add_argument("--state-ttl-hours", type=float, default=3.0, help="simulated hours state is kept")
    parser.add_argument("--captures", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rpcs", type=int, default=2)
    parser.add_argument("--ov-latency-ms", default="50-250")
    parser.add_argument("--commit-tokens", type=int, default=4000, help="commitTokenThreshold")
    parser.add_argument("--assemble-share", type=float, default=0.2, help="turns followed by an assemble")
    parser.add_argument("--watch-every", type=int, default=25, help="every n-th turn's XADD -> snapshot is timed")
    parser.add_argument("--seed", type=int, default=7)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
