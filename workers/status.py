"""What a running deployment looks like, read from Redis (the read model over the store and
the commit chain): per shard, what waits in its
turn stream (length, unread, pending, the oldest entry not yet applied and its age) and
which capture consumer owns it; every process's liveness (workers.store.health), the
commit jobs by state, the last hour's commit outcomes and the dead letters. ``/metrics``,
``ovstream status``, ``GET /v1/status`` and ``ovstream health`` read it here (their
formatting is workers.cli.status's).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from core import defaults
from core.config import Settings
from core.scaling import CAPTURE_LAG_PER_REPLICA, COMMIT_JOBS_PER_WORKER, capture_replicas, commit_workers
from core.shard_map import ShardMap, StreamShard
from workers.commits.api import in_flight_requests, job_counts, outcome_status, read_lost_extractions
from workers.store.applied import parse_id
from workers.store.connection import consumer_group, optional_text, stream_entries, text
from workers.store.deployment import SHARDS_FIELD
from workers.store.health import UNSAID_RELEASE, ProcessHealth, read_health
from workers.store.keys import Keys
from workers.store.schema import SCHEMA_FIELD, recorded_schema, schema_problem
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
    entries_read: int | None = None
    """Entries the capture group ever read from the stream (Redis' ``entries-read``): its
    rate is capture's. None before the group exists."""

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
                entries_read=_int_or_none(group.get("entries-read")) if group else None,
            )
        )
    return out


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


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
    schema: int | None = None
    """The layout of what the deployment's Redis holds (workers.store.schema; None: no deployment yet)."""
    shards_configured: int = 0
    """This process's ``shards`` (a MISMATCH when it is not the recorded one)."""
    shard_map: str = ""
    """The streams' generation and count, and the one draining (core.shard_map)."""
    extractions_lost: int = 0
    """Phase 2s found to have completed with no memories from substantive user text
    (workers.commits.repair), since the deployment began."""
    repairs: dict[str, int] = field(default_factory=dict)
    """The listed repairs of lost extractions by their commit's state."""
    repairs_started: int = 0
    """Repair commits started since the deployment began (each one more phase 2)."""
    suspects_waiting: int = 0
    """Suspected lost extractions waiting for their user's repair."""
    oldest_commit_s: float = 0.0
    """How long ago the oldest commit in flight was asked for (0: none in flight)."""
    oldest_commit: str = ""
    """That commit's id and session."""

    @property
    def commits_stalled(self) -> str | None:
        """Why commits wait with nothing moving them, when they do (``stalled_commits``)."""
        return stalled_commits(self.oldest_commit_s, self.oldest_commit, self.commit_jobs, self.processes)

    @property
    def releases(self) -> dict[str, int]:
        """The releases the processes heard of run, each with how many (two: a rolling upgrade
        under way, or one left behind)."""
        return dict(Counter(p.facts.get("version", UNSAID_RELEASE) for p in self.processes if p.state != "stale"))

    @property
    def plugins(self) -> list[str]:
        """The plugin versions that called an RPC process within ``PLUGIN_SEEN_S``."""
        said = (p.facts.get("plugins", "") for p in self.processes if p.role == "rpc" and p.state != "stale")
        return sorted({v for value in said for v in value.split(",") if v})

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
            "schema": self.schema,
            "schema_problem": schema_problem(self.schema),
            "shard_map": self.shard_map,
            "extractions_lost": self.extractions_lost,
            "repairs": self.repairs,
            "repairs_started": self.repairs_started,
            "suspects_waiting": self.suspects_waiting,
            "oldest_commit_s": round(self.oldest_commit_s, 3),
            "oldest_commit": self.oldest_commit,
            "commits_stalled": self.commits_stalled,
            "releases": self.releases,
            "plugins": self.plugins,
            "min_plugin_version": defaults.MIN_PLUGIN_VERSION,
        }


COMMIT_STALL_S = 30.0
"""A commit in flight this long with no commit job live (queued, scheduled or running) is said
to wait with nothing moving it (``ovstream status``, the console; the sweep resumes a commit
whose job died within seconds, so only a missing worker leaves it so)."""
COMMIT_INDEX_SAMPLE = 1000
"""Most in-flight commits read for the oldest (the index holds one per session committing)."""


def stalled_commits(oldest_s: float, oldest: str, jobs: dict[str, int], processes: list[ProcessHealth]) -> str | None:
    """What ``ovstream status`` says when commits wait with nothing moving them: the oldest in
    flight waited past ``COMMIT_STALL_S`` with no commit job live, or no live worker at all."""
    if oldest_s < COMMIT_STALL_S:
        return None
    live_jobs = sum(jobs.get(state, 0) for state in ("queued", "scheduled", "running", "polling"))
    workers = [p for p in processes if p.role == "worker" and p.state != "stale"]
    if live_jobs and workers:
        return None
    why = "no commit worker is live (start `ovstream worker`)" if not workers else "no commit job is live"
    return f"commits wait with nothing moving them: the oldest ({oldest}) was asked for {oldest_s:.0f} s ago; {why}"


def oldest_in_flight(client: redis.Redis, settings: Settings, now: float) -> tuple[float, str]:
    """(seconds since the oldest in-flight commit was asked for, its id and session) among the
    first ``COMMIT_INDEX_SAMPLE`` of the index; (0, "") when none is in flight."""
    requests = in_flight_requests(client, settings, COMMIT_INDEX_SAMPLE)
    if not requests:
        return 0.0, ""
    oldest = min(requests, key=lambda r: r.requested_at)
    return max(0.0, now - oldest.requested_at), f"{oldest.commit_id} of session {oldest.ov_session_id}"


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
    jobs = job_counts(client, settings)
    outcomes = Counter(outcome_status(fields) for _, fields in stream_entries(recent))
    lost = read_lost_extractions(client, settings)
    oldest_s, oldest = oldest_in_flight(client, settings, now_ms / 1000)
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
        schema=recorded_schema(deployment.get(SCHEMA_FIELD)) if deployment else None,
        shards_configured=settings.shards,
        shard_map=str(shard_map),
        extractions_lost=lost.lost_total,
        repairs=lost.repairs,
        repairs_started=lost.repairs_started,
        suspects_waiting=lost.suspects_waiting,
        oldest_commit_s=oldest_s,
        oldest_commit=oldest,
    )


def read_scaling(client: redis.Redis, settings: Settings) -> dict[str, Any]:
    """What an autoscaler reads (``GET /v1/scaling``): capture's replicas for the backlog of
    every stream read now (``core.scaling``; it follows a reshard), with the figures behind it,
    and the commits in flight."""
    shards = read_backlog(client, settings)
    backlog = sum((s.unread or 0) + s.pending for s in shards)
    queued = job_counts(client, settings)["queued"]
    return {
        "capture": {
            "replicas": capture_replicas(backlog, len(shards)),
            "backlog": backlog,
            "streams": len(shards),
            "backlogPerReplica": CAPTURE_LAG_PER_REPLICA,
        },
        # what `openclaw ovstream import` waits on, besides the backlog: phase 2 not flooded.
        # The slots still there, up to COMMIT_INDEX_SAMPLE (a final outcome removes its slot;
        # the index itself keeps it until the next sweep, so it is not counted)
        # and the commit workers the jobs queued on every line ask for (``core.scaling``: KEDA's
        # trigger for the workers; a list length would see the queue's own list only)
        "commits": {
            "inFlight": len(in_flight_requests(client, settings, COMMIT_INDEX_SAMPLE)),
            "queued": queued,
            "replicas": commit_workers(queued),
            "queuedPerReplica": COMMIT_JOBS_PER_WORKER,
        },
    }


def _where(settings: Settings) -> str:
    store = settings.redacted_redis_url() + (" (cluster)" if settings.redis_cluster else "")
    if settings.queue_urls == (settings.redis_url,):
        return store
    queues = ", ".join(settings.redacted_redis_url(url) for url in settings.queue_urls)
    return f"{store}, commit queue on {queues}"


# --- lag over time: the console's chart -----------------------------------------------------

LAG_SAMPLE_INTERVAL_S = 30
"""How often a shard's backlog is sampled (by any RPC process: one sample per interval)."""
LAG_HISTORY_S = 3600
"""How far back the samples go."""


@dataclass(frozen=True, slots=True)
class LagSample:
    at_ms: int
    lag: dict[str, int]
    """Shard name -> entries not yet applied (unread + pending)."""


def sample_lag(client: redis.Redis, settings: Settings, *, now_ms: int | None = None) -> bool:
    """Record every shard's backlog for this interval, unless another process did; drop
    samples older than ``LAG_HISTORY_S``. True when this call recorded it."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    interval_ms = LAG_SAMPLE_INTERVAL_S * 1000
    at = str(now_ms - now_ms % interval_ms)
    key = Keys(settings.key_prefix).lag_history()
    if client.hexists(key, at):
        return False
    lag = {s.name or str(s.shard): (s.unread or 0) + s.pending for s in read_backlog(client, settings)}
    added = bool(client.hsetnx(key, at, json.dumps(lag)))
    old = [f for f in client.hkeys(key) if int(text(f)) < now_ms - LAG_HISTORY_S * 1000]
    if old:
        client.hdel(key, *old)
    client.expire(key, 2 * LAG_HISTORY_S)  # gone when no RPC runs to sample it
    return added


def read_lag_history(client: redis.Redis, settings: Settings) -> list[LagSample]:
    """The samples of the last ``LAG_HISTORY_S``, oldest first."""
    raw = client.hgetall(Keys(settings.key_prefix).lag_history())
    samples = [LagSample(int(text(at)), {str(k): int(n) for k, n in json.loads(v).items()}) for at, v in raw.items()]
    return sorted(samples, key=lambda s: s.at_ms)
