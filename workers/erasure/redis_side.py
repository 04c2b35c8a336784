"""What ovstream's Redis keeps of an erased scope, found and removed (workers.erasure).

Every session key of the scope (found by one SCAN of the deployment's shard-tagged keys, its
scope and session read from the name), the session's newest-turn and lineage keys, the claims
and repair pools of its commits, its commit jobs (cancelled and deleted, on the queue's Redis),
and its entries in the deployment-wide streams and sets: the turn streams, the dead letters, the
commit outcomes, the listed repairs, the suspects, the recent sessions, the commits in flight.
For a whole tenant also its per-tenant keys (repair budget and turn, redaction counts). Each step
is idempotent: run again, it finds what is left. ``dry_run`` counts and removes nothing.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec
import redis as redis_lib
from rq.job import Job

from core.config import Settings
from core.erasure import ErasureScope
from core.events import STREAM_FIELD, CommitOutcome, EventDecodeError, TurnEvent, decode
from core.turns import address_of
from workers.commits.records import OUTCOME_FIELD
from workers.commits.repair_pool import RepairEntry, Suspect, pooled
from workers.store.connection import queue_client, stream_entries, text
from workers.store.keys import Keys, glob_escape

log = logging.getLogger(__name__)

SESSION_KINDS = frozenset(
    {"applied", "snapshot", "commits", "commit-gen", "commit-inflight", "commits-unannounced", "parked", "lineage"}
    | {"assembled", "assembled-recall", "imports", "recalled", "recall"}
)
"""Kinds of the keys named ``<kind>:<scope>:<session>`` (``recall``: with ``:<turn>`` after)."""
SCAN_COUNT = 1000
STREAM_PAGE = 1000


@dataclass
class Found:
    """The scope's sessions in Redis, and their commits."""

    sessions: dict[tuple[int, str, str], list[str]] = field(default_factory=dict)
    """(shard, scope, OV session id) -> its keys."""
    commits: set[str] = field(default_factory=set)
    repair_sessions: set[str] = field(default_factory=set)
    """OV sessions that repaired an extraction of the scope (workers.commits.repair_pool)."""

    @property
    def session_ids(self) -> set[str]:
        return {sid for _, _, sid in self.sessions}


def find(redis: redis_lib.Redis, settings: Settings, scope: ErasureScope) -> Found:
    """The scope's sessions (with every key named for them) and their commits."""
    keys, found = Keys(settings.key_prefix), Found()
    named = re.compile(rf"^{re.escape(settings.key_prefix)}:\{{s(\d+)\}}:([a-z-]+):(.+)$")
    for raw in redis.scan_iter(match=f"{glob_escape(settings.key_prefix)}:{{s*}}:*", count=SCAN_COUNT):
        match = named.match(text(raw))
        if match is None or match.group(2) not in SESSION_KINDS:
            continue
        rest = match.group(3)
        parts = rest.rsplit(":", 2) if match.group(2) == "recall" else rest.rsplit(":", 1)
        if len(parts) < 2 or not scope.covers_scope(parts[0], parts[1]):
            continue
        found.sessions.setdefault((int(match.group(1)), parts[0], parts[1]), []).append(text(raw))
    for (shard, _, sid), session_keys in found.sessions.items():
        session_keys.append(keys.last_turn(shard, sid))
        for key in session_keys:
            if key.startswith(f"{settings.key_prefix}:{{s{shard}}}:commits:"):
                found.commits.update(text(c) for c in redis.hkeys(key))
    for raw in redis.scan_iter(match=f"{glob_escape(keys.extraction_repair_pool(''))}*", count=SCAN_COUNT):
        repair_sid = text(raw)[len(keys.extraction_repair_pool("")) :]
        if any(_suspect_covered(scope, s) for s in pooled(redis, settings, repair_sid)):
            found.repair_sessions.add(repair_sid)
    return found


def _suspect_covered(scope: ErasureScope, suspect: Suspect) -> bool:
    r = suspect.request
    return scope.covers(r.user, r.agent_id, r.ov_session_id)


def remove(
    redis: redis_lib.Redis, settings: Settings, scope: ErasureScope, found: Found, *, dry_run: bool
) -> Counter[str]:
    """Remove (or, ``dry_run``, count) what ``found`` names and the scope's stream entries."""
    keys, removed = Keys(settings.key_prefix), Counter[str]()
    _cancel_jobs(redis, settings, found.commits, removed, dry_run=dry_run)
    for (_, _, sid), session_keys in found.sessions.items():
        present = [k for k in session_keys if redis.exists(k)]
        removed["redis_keys"] += len(present)
        if present and not dry_run:
            redis.delete(*present)  # one session's keys share its shard's hash slot
        if redis.exists(keys.lineage_ref(sid)):
            removed["redis_keys"] += 1
            if not dry_run:
                redis.delete(keys.lineage_ref(sid))
    per_commit = [k for c in found.commits for k in (keys.extraction_repair(c), keys.extraction_loss(c))]
    per_commit += [keys.extraction_repair_pool(r) for r in found.repair_sessions]
    for key in per_commit:
        if redis.exists(key):
            removed["redis_keys"] += 1
            if not dry_run:
                redis.delete(key)
    _streams(redis, settings, scope, removed, dry_run=dry_run)
    _sets(redis, settings, scope, found, removed, dry_run=dry_run)
    return removed


def _cancel_jobs(
    redis: redis_lib.Redis, settings: Settings, commits: set[str], removed: Counter[str], *, dry_run: bool
) -> None:
    """The commit jobs (commit, polls, rechecks, checks, repairs) of the scope's commits: cancelled
    and deleted, so none writes a record of them again; on every queue Redis (a scope's
    sessions are spread over them: core.queue_routing)."""
    for index in range(len(settings.queue_urls)):
        _cancel_jobs_on(queue_client(redis, settings, index), commits, removed, dry_run=dry_run)


def _cancel_jobs_on(queue_redis: redis_lib.Redis, commits: set[str], removed: Counter[str], *, dry_run: bool) -> None:
    for commit_id in commits:
        for raw in queue_redis.scan_iter(match=f"rq:job:{glob_escape(commit_id)}*", count=SCAN_COUNT):
            job_id = text(raw)[len("rq:job:") :]
            if ":" in job_id:  # a job's own sub-key (its dependents, its results)
                continue
            removed["commit_jobs"] += 1
            if dry_run:
                continue
            try:
                job = Job.fetch(job_id, connection=queue_redis)
                job.cancel()
                job.delete()
            except Exception as exc:  # gone meanwhile (finished, deleted): nothing left to cancel
                log.debug("job %s: %s", job_id, exc)


def _entries(redis: redis_lib.Redis, stream: str) -> Iterator[tuple[str, dict[bytes, bytes]]]:
    after = "-"
    while True:
        page = stream_entries(redis.xrange(stream, min=after, max="+", count=STREAM_PAGE))
        yield from ((text(i), f) for i, f in page)
        if len(page) < STREAM_PAGE:
            return
        after = "(" + text(page[-1][0])


def _event_covered(settings: Settings, scope: ErasureScope, payload: bytes | None) -> bool:
    if not payload:
        return False
    try:
        event = decode(payload, TurnEvent)
        address = address_of(event, settings.agent_prefix)
    except (EventDecodeError, ValueError):
        return False  # nothing names whose it is
    return scope.covers(address.tenant, address.agent_id, address.ov_session_id)


def _record_covered(scope: ErasureScope, raw: bytes | None, kind: type[CommitOutcome] | type[RepairEntry]) -> bool:
    try:
        record = msgspec.json.decode(raw or b"", type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return scope.covers(record.user, record.agent_id, record.ov_session_id)


def _streams(
    redis: redis_lib.Redis, settings: Settings, scope: ErasureScope, removed: Counter[str], *, dry_run: bool
) -> None:
    keys = Keys(settings.key_prefix)
    turn_streams = [
        text(k)
        for k in redis.scan_iter(match=f"{glob_escape(settings.key_prefix)}:{{s*}}:turns*", count=SCAN_COUNT)
        if redis.type(k) in (b"stream", "stream")
    ]

    def turn(fields: dict[bytes, bytes]) -> bool:
        return _event_covered(settings, scope, fields.get(STREAM_FIELD.encode()))

    def outcome(fields: dict[bytes, bytes]) -> bool:
        return _record_covered(scope, fields.get(OUTCOME_FIELD.encode()), CommitOutcome)

    def repair(fields: dict[bytes, bytes]) -> bool:
        return _record_covered(scope, fields.get(b"e"), RepairEntry)

    checks: list[tuple[str, str, Callable[[dict[bytes, bytes]], bool]]] = [(s, "turns", turn) for s in turn_streams]
    checks += [
        (keys.dead_letters(), "dead_letters", turn),
        (keys.commit_outcomes(), "commit_outcomes", outcome),
        (keys.extraction_repairs(), "repairs_listed", repair),
    ]
    for stream, what, covered in checks:
        doomed = [entry_id for entry_id, fields in _entries(redis, stream) if covered(fields)]
        removed[what] += len(doomed)
        if doomed and not dry_run:
            redis.xdel(stream, *doomed)


def _sets(
    redis: redis_lib.Redis,
    settings: Settings,
    scope: ErasureScope,
    found: Found,
    removed: Counter[str],
    *,
    dry_run: bool,
) -> None:
    """The scope's members of the deployment-wide sets and hashes, and a tenant's own keys."""
    keys, tenant = Keys(settings.key_prefix), scope.tenant or "-"
    suspects = keys.extraction_suspects(tenant)
    gone = [f for f, v in redis.hgetall(suspects).items() if _suspected(scope, v)]
    removed["redis_members"] += len(gone)
    if gone and not dry_run:
        redis.hdel(suspects, *gone)
    session_keys = {k for ks in found.sessions.values() for k in ks}
    for zset in (keys.commits_in_flight(), keys.unannounced_index()):
        members = [text(m) for m in redis.zrange(zset, 0, -1) if text(m) in session_keys]
        removed["redis_members"] += len(members)
        if members and not dry_run:
            redis.zrem(zset, *members)
    recent = keys.recent_sessions(scope.tenant)
    members = [text(m) for m in redis.zrange(recent, 0, -1) if any(sid in text(m) for sid in found.session_ids)]
    removed["redis_members"] += len(members)
    if members and not dry_run:
        redis.zrem(recent, *members)
    if scope.kind != "user":
        return
    tenant_keys = [keys.extraction_repair_starts(tenant), keys.extraction_repair_turn(tenant), suspects, recent]
    present = [k for k in tenant_keys if redis.exists(k)]
    counts = [f for f in redis.hkeys(keys.redactions()) if text(f).startswith(tenant + "|")]
    removed["redis_keys"] += len(present)
    removed["redis_members"] += len(counts)
    if dry_run:
        return
    for key in present:
        redis.delete(key)
    if counts:
        redis.hdel(keys.redactions(), *counts)
    redis.srem(keys.extraction_suspect_tenants(), tenant)
    redis.srem(keys.recent_tenants(), tenant)


def _suspected(scope: ErasureScope, raw: bytes | str) -> bool:
    try:
        return _suspect_covered(scope, msgspec.json.decode(raw, type=Suspect))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
