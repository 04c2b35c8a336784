"""What a running deployment looks like, read from Redis: per shard, what waits in its
turn stream (length, unread, pending, the oldest entry not yet applied and its age) and
which capture consumer owns it; every process's liveness (workers.store.health), the
commit jobs by state, the last hour's commit outcomes and the dead letters. ``/metrics``,
``ovstream status``, ``GET /v1/status`` and ``ovstream health`` read it here.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import redis

from core.config import Settings
from core.shard_map import ShardMap, StreamShard
from workers.store.applied import parse_id
from workers.store.commit_queue import commit_queue
from workers.store.commit_records import outcome_status
from workers.store.connection import REDIS_ERRORS, connect, consumer_group, optional_text, stream_entries, text
from workers.store.deployment import SHARDS_FIELD
from workers.store.health import ProcessHealth, read_health
from workers.store.keys import Keys
from workers.store.shard_map import map_of, read_shard_map


@dataclass(frozen=True, slots=True)
class ShardBacklog:
    """One shard's turn stream as the capture group sees it."""

    shard: int
    length: int
    """Entries in the stream: unapplied ones plus applied ones not trimmed yet."""
    unread: int | None
    """Entries not yet delivered to the capture group (None: Redis cannot tell)."""
    pending: int
    """Entries delivered but not yet acknowledged (applied)."""
    oldest_unapplied: str | None
    """Stream id of the oldest entry unread or pending; None when capture is caught up."""
    owner: str | None
    """The capture consumer holding the shard's lease."""
    generation: int = 0
    """The shard map generation of the stream (core.shard_map); 0 until a reshard."""
    name: str = ""
    """``shard`` as logs name it: the number, or ``g<generation>.<number>`` after a reshard."""

    def oldest_age_s(self, now_ms: int) -> float:
        """How long the oldest unapplied entry has waited (0 when none waits)."""
        if self.oldest_unapplied is None:
            return 0.0
        return max(0.0, (now_ms - parse_id(self.oldest_unapplied)[0]) / 1000)


def read_backlog(client: redis.Redis, settings: Settings, shard_map: ShardMap | None = None) -> list[ShardBacklog]:
    """Every stream's backlog (the draining generation's first), in three pipelined round trips."""
    keys = Keys(settings.key_prefix)
    group_name = settings.consumer_group
    shard_map = shard_map or read_shard_map(client, settings)
    streams = [*shard_map.draining(), *shard_map.current()]
    pipe = client.pipeline(transaction=False)
    for shard in streams:
        stream = keys.stream(shard)
        pipe.xlen(stream)
        pipe.xinfo_groups(stream)
        pipe.xpending(stream, group_name)
        pipe.hget(keys.capture_lease(shard), "id")
    replies = pipe.execute(raise_on_error=False)  # a stream or group not made yet: an error reply
    firsts = client.pipeline(transaction=False)
    rows: list[tuple[StreamShard, int, dict[str, Any] | None, Any, Any]] = []
    for i, shard in enumerate(streams):
        length, info, pending, owner = replies[4 * i : 4 * i + 4]
        group = consumer_group(info, group_name)
        rows.append((shard, int(length) if isinstance(length, int) else 0, group, pending, owner))
        # the first entry after the group's last delivered one: the oldest unread
        last = text(group.get("last-delivered-id")) if group else "0-0"
        firsts.xrange(keys.stream(shard), min=f"({last}", count=1)
    unread_firsts = firsts.execute(raise_on_error=False)
    out: list[ShardBacklog] = []
    for (shard, length, group, pending, owner), first in zip(rows, unread_firsts):
        candidates: list[str] = []
        held = int(pending.get("pending") or 0) if isinstance(pending, dict) else 0
        if held and pending.get("min") is not None:
            candidates.append(text(pending["min"]))
        if isinstance(first, list) and first:
            candidates.append(text(first[0][0]))
        out.append(
            ShardBacklog(
                shard=shard.number,
                generation=shard.generation,
                name=str(shard),
                length=length,
                unread=_unread(group, length, first),
                pending=held,
                oldest_unapplied=min(candidates, key=parse_id) if candidates else None,
                owner=optional_text(owner) if not isinstance(owner, Exception) else None,
            )
        )
    return out


def _unread(group: dict[str, Any] | None, length: int, first_unread: Any) -> int | None:
    """Entries the group has not read yet. Its ``lag`` counts them from two counters that a
    failover can leave stale (a promoted replica's group reported 41-45 unread when nothing
    was): when no entry follows the group's last delivered id, nothing is unread whatever
    ``lag`` says; when one does, at least one is."""
    if group is None:
        return length
    lag = group.get("lag")
    if isinstance(first_unread, list):
        if not first_unread:
            return 0
        return max(1, int(lag)) if lag is not None else None
    return None if lag is None else int(lag)


@dataclass(frozen=True, slots=True)
class DeploymentStatus:
    shards: list[ShardBacklog]
    processes: list[ProcessHealth]
    capture_consumers: list[str]
    commits_in_flight: int
    commit_jobs: dict[str, int]
    """The commit queue's jobs by state (queued, scheduled, running, failed)."""
    outcomes_last_hour: dict[str, int]
    """Commit outcomes recorded in the last hour, by status."""
    dead_letters: int
    now_ms: int
    redis: str = ""
    """Where the store and the commit queue are (credentials left out)."""
    shards_recorded: int | None = None
    """The deployment's recorded ``shards`` (workers.store.deployment); None before any process ran."""
    shards_configured: int = 0
    """This process's ``shards`` (a MISMATCH when it is not the recorded one)."""
    shard_map: str = ""
    """The streams' generation and count, and the one draining (core.shard_map)."""

    def as_json(self) -> dict[str, Any]:
        shards = [{**asdict(s), "oldest_age_s": round(s.oldest_age_s(self.now_ms), 3)} for s in self.shards]
        return {
            "shards": shards,
            "processes": [asdict(p) for p in self.processes],
            "capture_consumers": self.capture_consumers,
            "commits_in_flight": self.commits_in_flight,
            "commit_jobs": self.commit_jobs,
            "outcomes_last_hour": self.outcomes_last_hour,
            "dead_letters": self.dead_letters,
            "redis": self.redis,
            "shards_recorded": self.shards_recorded,
            "shard_map": self.shard_map,
        }


def read_status(client: redis.Redis, settings: Settings) -> DeploymentStatus:
    keys = Keys(settings.key_prefix)
    now_ms = int(time.time() * 1000)
    deployment = {text(k): text(v) for k, v in client.hgetall(keys.deployment()).items()}
    shard_map = map_of(settings, deployment)
    shards = read_backlog(client, settings, shard_map)
    pipe = client.pipeline(transaction=False)
    pipe.zrangebyscore(keys.capture_workers(), now_ms, "+inf")
    pipe.zcard(keys.commits_in_flight())
    pipe.xlen(keys.dead_letters())
    pipe.xrange(keys.commit_outcomes(), min=f"{now_ms - 3_600_000}-0", max="+")
    consumers, in_flight, dead, recent = pipe.execute()
    recorded = deployment.get(SHARDS_FIELD)
    queue = commit_queue(client, settings)
    jobs = {
        "queued": queue.count,
        "scheduled": queue.scheduled_job_registry.count,
        "running": queue.started_job_registry.count,
        "failed": queue.failed_job_registry.count,
    }
    outcomes = Counter(outcome_status(fields) for _, fields in stream_entries(recent))
    return DeploymentStatus(
        shards=shards,
        processes=read_health(client, settings),
        capture_consumers=sorted(text(c) for c in consumers),
        commits_in_flight=int(in_flight),
        commit_jobs=jobs,
        outcomes_last_hour=dict(sorted(outcomes.items())),
        dead_letters=int(dead),
        now_ms=now_ms,
        redis=_where(settings),
        shards_recorded=None if recorded is None else int(recorded),
        shards_configured=settings.shards,
        shard_map=str(shard_map),
    )


def _where(settings: Settings) -> str:
    store = settings.redacted_redis_url() + (" (cluster)" if settings.redis_cluster else "")
    if settings.rq_redis_url == settings.redis_url:
        return store
    return f"{store}, commit queue on {settings.redacted_redis_url(settings.rq_redis_url)}"


def format_status(status: DeploymentStatus) -> str:
    lines = [f"{'shard':>5}  {'length':>8}  {'unread':>8}  {'pending':>8}  {'oldest':>9}  owner"]
    for s in status.shards:
        unread = "?" if s.unread is None else str(s.unread)
        age = f"{s.oldest_age_s(status.now_ms):.1f}s" if s.oldest_unapplied else "-"
        lines.append(f"{s.name or s.shard:>5}  {s.length:>8}  {unread:>8}  {s.pending:>8}  {age:>9}  {s.owner or '-'}")
    for p in status.processes:
        facts = " ".join(f"{k}={v}" for k, v in sorted(p.facts.items()))
        lines.append(f"{p.role:>8} {p.name} on {p.host} pid {p.pid}: {p.state}, heard {p.heard_s_ago:.1f}s ago {facts}")
    lines.append(f"capture consumers: {', '.join(status.capture_consumers) or 'none'}")
    jobs = ", ".join(f"{state} {count}" for state, count in status.commit_jobs.items())
    outcomes = ", ".join(f"{state} {count}" for state, count in status.outcomes_last_hour.items()) or "none"
    lines.append(f"commit jobs: {jobs}; outcomes in the last hour: {outcomes}")
    lines.append(f"commits in flight: {status.commits_in_flight}; dead letters: {status.dead_letters}")
    recorded = "none yet" if status.shards_recorded is None else str(status.shards_recorded)
    mismatch = (
        ""
        if status.shards_recorded in (None, status.shards_configured)
        else f"  <- MISMATCH: this process has shards = {status.shards_configured}; see README, Changing shards"
    )
    lines.append(f"redis: {status.redis}; {status.shard_map} (created with: {recorded}){mismatch}")
    return "\n".join(lines)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--watch", type=float, metavar="SECONDS", help="print again every SECONDS until Ctrl-C")
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)  # --watch rounds (tests)


def cli_status(settings: Settings, args: argparse.Namespace) -> int:
    client = connect(settings)
    watch, rounds = getattr(args, "watch", None), 0
    try:
        while True:
            try:
                status = read_status(client, settings)
            except REDIS_ERRORS as exc:
                print(f"ovstream status: Redis unreachable at {settings.redacted_redis_url()}: {exc}", flush=True)
                if not watch:
                    return 1
            else:
                shown = json.dumps(status.as_json(), indent=2) if args.json else format_status(status)
                stamp = time.strftime("%H:%M:%S") + "\n" if watch and not args.json else ""
                print(stamp + shown, flush=True)
            rounds += 1
            if not watch or rounds == getattr(args, "count", 0):
                return 0
            time.sleep(watch)
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()


def add_health_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", choices=["capture", "worker"], help="only processes of this role")


def cli_health(settings: Settings, args: argparse.Namespace) -> int:
    """A probe for a supervisor or an orchestrator: exit 0 when an ovstream process of this
    host (``--role``) was heard of lately (ok, or degraded: OV away is not the process's
    fault, and restarting it would not help), else 1, with a line saying why."""
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


def _said(p: ProcessHealth) -> str:
    why = f" (ov {p.facts.get('ov', '?')})" if p.state == "degraded" else ""
    return f"{p.role} {p.name} {p.state}{why}"
