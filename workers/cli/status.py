"""``ovstream status`` and ``ovstream health``: the deployment's status (workers.status) as
a table, JSON or a probe's exit code."""

from __future__ import annotations

import argparse
import json
import socket
import time

from core import defaults
from core.config import Settings
from workers.cli.tables import table
from workers.liveness import LIVENESS_STALE_S, live_processes
from workers.status import DeploymentStatus, read_status
from workers.store.connection import REDIS_ERRORS, connect
from workers.store.health import ProcessHealth, read_health
from workers.store.memory import MemoryReport, read_memory
from workers.store.schema import schema_problem


def _layout(schema: int | None) -> str:
    if schema is not None:
        return f"Redis layout {schema}"
    # no deployment record: a new deployment, or a Redis restarted without persistence
    return "Redis layout not recorded: the next ovstream process to start records it"


def format_status(status: DeploymentStatus) -> str:
    lines = [f"{'shard':>5}  {'length':>8}  {'unread':>8}  {'pending':>8}  {'oldest':>9}  owner"]
    for s in status.shards:
        unread = "?" if s.unread is None else str(s.unread)
        age = f"{s.oldest_age_s(status.now_ms):.1f}s" if s.oldest_unapplied else "-"
        lines.append(f"{s.name or s.shard:>5}  {s.length:>8}  {unread:>8}  {s.pending:>8}  {age:>9}  {s.owner or '-'}")
    for p in status.processes:
        facts = " ".join(f"{k}={v or 'none'}" for k, v in sorted(p.facts.items()))
        lines.append(f"{p.role:>8} {p.name} on {p.host} pid {p.pid}: {p.state}, heard {p.heard_s_ago:.1f}s ago {facts}")
    lines.append(f"capture consumers: {', '.join(status.capture_consumers) or 'none'}")
    jobs = ", ".join(f"{state} {count}" for state, count in status.commit_jobs.items())
    outcomes = ", ".join(f"{state} {count}" for state, count in status.outcomes_last_hour.items()) or "none"
    lines.append(f"commit jobs: {jobs}; outcomes in the last hour: {outcomes}")
    oldest = f" (the oldest asked for {status.oldest_commit_s:.0f} s ago)" if status.commits_in_flight else ""
    lines.append(f"commits in flight: {status.commits_in_flight}{oldest}; dead letters: {status.dead_letters}")
    if status.commits_stalled:
        lines.append(f"PROBLEM: {status.commits_stalled}")
    if status.extractions_lost or status.repairs or status.suspects_waiting:
        repairs = ", ".join(f"{state} {count}" for state, count in status.repairs.items()) or "none listed"
        lines.append(
            f"extractions lost to OV's merge (their repair, alone, wrote the memories): {status.extractions_lost}; "
            f"phase 2s with no memory beside another of their user, extracted again alone: {repairs} "
            f"({status.repairs_started} repair commits); waiting for their user's repair: {status.suspects_waiting}"
        )
    releases = ", ".join(f"{v} ({n} process{'es' if n > 1 else ''})" for v, n in sorted(status.releases.items()))
    plugins = ", ".join(status.plugins) or "none lately"
    lines.append(
        f"releases running: {releases or 'none'} ({_layout(status.schema)}); plugins talking: {plugins} "
        f"(the oldest accepted: {defaults.MIN_PLUGIN_VERSION})"
    )
    layout_problem = schema_problem(status.schema)
    if layout_problem:
        lines.append(f"PROBLEM: {layout_problem}")
    recorded = "none yet" if status.shards_recorded is None else str(status.shards_recorded)
    mismatch = (
        ""
        if status.shards_recorded in (None, status.shards_configured)
        else f"  <- MISMATCH: this process has shards = {status.shards_configured}; see README, Changing shards"
    )
    lines.append(f"redis: {status.redis}; {status.shard_map} (created with: {recorded}){mismatch}")
    return "\n".join(lines)


def _size(n: float) -> str:
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KB", "MB"):
        n /= 1000
        if n < 1000:
            return f"{n:.2f} {unit}"
    return f"{n / 1000:.2f} GB"


def _age(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} d"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds:.0f} s"


def format_memory(report: MemoryReport, settings: Settings) -> str:
    """The deployment's Redis memory by key family, largest first, and its oldest session state."""
    if report.problem is not None:
        return f"redis memory by key family: not measured ({report.problem})"
    rows = [
        [name, f"{f.keys:,}", _size(f.bytes), _age(f.oldest_idle_s)]
        for name, f in sorted(report.families.items(), key=lambda kv: -kv[1].bytes)
    ]
    total = sum(f.bytes for f in report.families.values())
    seen = "every key" if report.complete else f"a sample of {report.keys:,} keys"
    head = f"redis memory by key family ({seen}, {_size(total)}):"
    oldest = (
        f"oldest session state kept: idle {_age(report.oldest_state_idle_s)} "
        f"(it goes after {_age(settings.session_state_ttl_s)}: sessionStateTtlS)"
    )
    return "\n".join([head, table(["FAMILY", "KEYS", "BYTES", "OLDEST IDLE"], rows), oldest])


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--watch", type=float, metavar="SECONDS", help="print again every SECONDS until Ctrl-C")
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)  # --watch rounds (tests)
    parser.add_argument("--no-memory", action="store_true", help="skip the look at Redis memory by key family")


def cli_status(settings: Settings, args: argparse.Namespace) -> int:
    client = connect(settings)
    watch, rounds = getattr(args, "watch", None), 0
    try:
        while True:
            try:
                status = read_status(client, settings)
                memory = None if getattr(args, "no_memory", False) else read_memory(client, settings)
            except REDIS_ERRORS as exc:
                print(f"ovstream status: Redis unreachable at {settings.redacted_redis_url()}: {exc}", flush=True)
                if not watch:
                    return 1
            else:
                print(_shown(status, memory, settings, args, stamped=bool(watch)), flush=True)
            rounds += 1
            if not watch or rounds == getattr(args, "count", 0):
                return 0
            time.sleep(watch)
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()


def _shown(
    status: DeploymentStatus,
    memory: MemoryReport | None,
    settings: Settings,
    args: argparse.Namespace,
    *,
    stamped: bool,
) -> str:
    if args.json:
        answer = status.as_json()
        if memory is not None:
            answer["memory"] = memory.as_json()
        return json.dumps(answer, indent=2)
    parts = [time.strftime("%H:%M:%S")] if stamped else []
    parts.append(format_status(status))
    if memory is not None:
        parts.append(format_memory(memory, settings))
    return "\n".join(parts)


def add_health_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", choices=["capture", "worker"], help="only processes of this role")
    parser.add_argument(
        "--probe",
        choices=["ready", "live"],
        default="ready",
        help="ready (default): heard of lately in Redis (1 with Redis away: it cannot serve now); "
        "live: its loop still runs, Redis and OV or not (1 only when stuck): for a liveness probe",
    )


def cli_health(settings: Settings, args: argparse.Namespace) -> int:
    """A probe for a supervisor or an orchestrator. ``--probe ready``: exit 0 when an ovstream
    process of this host (``--role``) was heard of lately (ok, or degraded: OV away), else 1,
    with a line saying why (Redis away included: it cannot serve now). ``--probe live``: exit 0
    while the process's loop runs, whatever Redis and OV do (workers.liveness)."""
    if getattr(args, "probe", "ready") == "live":
        return _live(settings, args.role)
    client = connect(settings)
    try:
        processes = read_health(client, settings)
    except REDIS_ERRORS as exc:
        print(f"unhealthy: Redis unreachable: {exc}")
        return 1
    finally:
        client.close()
    host = socket.gethostname()
    mine = [p for p in processes if p.host == host and (args.role is None or p.role == args.role)]
    alive = [p for p in mine if p.state != "stale"]
    if not alive:
        what = f"{args.role} process" if args.role else "ovstream process"
        seen = ", ".join(f"{p.name} {p.state} ({p.heard_s_ago:.0f}s)" for p in mine) or "none heard of"
        print(f"unhealthy: no live {what} on {host}: {seen}")
        return 1
    # degraded still exits 0 (a liveness probe must not restart a process for OV's outage),
    # but the line leads with it: an operator reading it must not take it for healthy
    verdict = "degraded" if any(p.state == "degraded" for p in alive) else "healthy"
    print(f"{verdict}: " + ", ".join(_said(p) for p in alive))
    return 0


def _live(settings: Settings, role: str | None) -> int:
    roles = [role] if role else ["capture", "worker"]
    found = {r: live_processes(settings, r) for r in roles}
    stuck = [f"{r} pid {p.pid} ({p.age_s:.0f}s)" for r, ps in found.items() for p in ps if p.age_s > LIVENESS_STALE_S]
    alive = [
        f"{r} pid {p.pid} ({p.age_s:.1f}s ago)" for r, ps in found.items() for p in ps if p.age_s <= LIVENESS_STALE_S
    ]
    if stuck or not alive:
        why = f"stuck, no beat for over {LIVENESS_STALE_S:.0f}s: {', '.join(stuck)}" if stuck else "none running"
        print(f"not alive: {'/'.join(roles)} process on {socket.gethostname()} ({settings.liveness_dir}): {why}")
        return 1
    print("alive: " + ", ".join(alive))
    return 0


def _said(p: ProcessHealth) -> str:
    why = f" (ov {p.facts.get('ov', '?')})" if p.state == "degraded" else ""
    return f"{p.role} {p.name} {p.state}{why}"
