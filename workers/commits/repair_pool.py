"""Suspected lost extractions wait, and are repaired together (core.repair).

``check_extraction`` (workers.commits.repair) records a suspect in its tenant's hash
(``Keys.extraction_suspects``) and schedules ``repair_extractions``. That job waits while a
repair of the tenant is unfinished (the tenant's turn: a repair overlapping another extraction
of its user could be merged away again), while commits of the user run (for as long as
``phase2_deadline_s`` from the oldest suspect: they may add suspects, or merge the repair), and
while the user's hourly budget (``extraction_repairs_per_hour``) is spent. Then it takes a pool
of them (``core.repair.repair_pool``: one agent's, oldest first), fixes it under the repair
session's name (``Keys.extraction_repair_pool``: a rerun after a crash takes the same), writes
their archives' user messages to that one session and commits it alone: one phase 2 for all of
them. Each suspect is claimed (``Keys.extraction_repair``) and listed; the repair's own commit
gives the verdict (``workers.commits.repair``).
"""

from __future__ import annotations

import logging
import time
from functools import partial

import msgspec
import redis as redis_lib

from core.config import Settings
from core.events import EVENT_VERSION, CommitRequest, EventDecodeError, decode, encode
from core.ov.client import OVError
from core.ov.messages import OVMessage
from core.repair import (
    REPAIR_ATTEMPTS,
    REPAIR_BUDGET_WINDOW_S,
    is_repair_session,
    repair_budget_wait,
    repair_messages,
    repair_pool,
    repair_session_id,
)
from core.session import SessionAddress
from workers import logs
from workers.commits.context import JobContext, context_for
from workers.commits.records import FINAL_STATUSES, CommitRecords, in_flight_requests
from workers.commits.request import request_commit
from workers.commits.run import patiently
from workers.commits.schedule import schedule_job
from workers.store.connection import optional_text, text
from workers.store.keys import Keys
from workers.store.usage import TALLY

log = logging.getLogger(__name__)

REPAIR_WAIT_S = 5.0
"""How long a repair waits before looking again (its tenant's turn, its user's commits), and
how long a first suspect waits for others of its user to join it."""
SUSPECTS_KEPT = 400
"""Most suspects one tenant keeps waiting; one more is not repaired (said at WARNING)."""
BUSY_READ = 500
"""Commits in flight read for one of the suspect's user."""


REPAIRS_LISTED = 1000
"""Approximate length of the list of repaired suspects (``Keys.extraction_repairs``)."""


class RepairEntry(msgspec.Struct, kw_only=True):
    """One suspected lost extraction, as listed: the commit, its archive, and the commit repairing it."""

    v: int = EVENT_VERSION
    commit_id: str
    ov_session_id: str
    agent_id: str
    user: str | None = None
    archive_uri: str
    repair: CommitRequest
    at: float


class Suspect(msgspec.Struct, kw_only=True):
    """A commit whose extraction may have been lost: its request and its archive."""

    v: int = EVENT_VERSION
    request: CommitRequest
    archive_uri: str
    at: float
    chars: int = 0
    """How many characters the user said in the archive (what a repair session holds is bounded)."""
    attempt: int = 0
    """Repairs tried before this one (each wrote nothing while overlapping another commit)."""


def tenant_of(request: CommitRequest) -> str:
    return request.user or "-"


def suspect(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, archive_uri: str, chars: int) -> str:
    """Record ``request`` as a suspect of its tenant and have a repair look at the tenant's."""
    keys, tenant = Keys(settings.key_prefix), tenant_of(request)
    if redis.hlen(keys.extraction_suspects(tenant)) >= SUSPECTS_KEPT:
        log.warning(
            "commit %s: %d suspected lost extractions of its user wait already; this one is not repaired",
            request.commit_id,
            SUSPECTS_KEPT,
        )
        return "not repaired: too many wait"
    entry = Suspect(request=request, archive_uri=archive_uri, at=time.time(), chars=chars)
    pipe = redis.pipeline(transaction=False)
    pipe.hsetnx(keys.extraction_suspects(tenant), request.commit_id, encode(entry))
    pipe.expire(keys.extraction_suspects(tenant), settings.session_state_ttl_s)
    pipe.sadd(keys.extraction_suspect_tenants(), tenant)
    pipe.execute()
    schedule_repair(redis, settings, request, REPAIR_WAIT_S)
    return "suspected: waits for its user's repair"


def schedule_repair(redis: redis_lib.Redis, settings: Settings, request: CommitRequest, delay_s: float) -> None:
    schedule_job(
        redis,
        settings,
        request,
        f"{request.commit_id}_repair{int(time.time() * 1000)}",
        delay_s,
        "workers.commits.repair_pool.repair_extractions",
        description=f"repair the suspected extractions of {tenant_of(request)}",
    )


def repair_extractions(request_json: str, key_prefix: str) -> str:
    """RQ job: repair the suspects waiting for ``request``'s tenant (one pool). Returns what it did."""
    request = decode(request_json, CommitRequest)
    with logs.fields(commit_id=request.commit_id):
        ctx = context_for(key_prefix)
        said = patiently(request, lambda: run_repair(ctx.store, ctx, request))
        log.info("repair of user %s's suspected lost extractions: %s", tenant_of(request), said)
        return said


def waiting_suspects(redis: redis_lib.Redis, settings: Settings, tenant: str) -> dict[str, Suspect]:
    raw = redis.hgetall(Keys(settings.key_prefix).extraction_suspects(tenant))
    found = {}
    for commit_id, value in raw.items():
        try:
            found[text(commit_id)] = decode(value, Suspect)
        except Exception:  # an entry no release here wrote: nothing to repair from
            log.warning("suspect %s of tenant %s unreadable; dropped", text(commit_id), tenant)
            redis.hdel(Keys(settings.key_prefix).extraction_suspects(tenant), commit_id)
    return found


def run_repair(redis: redis_lib.Redis, ctx: JobContext, trigger: CommitRequest) -> str:
    settings, keys, tenant = ctx.settings, Keys(ctx.settings.key_prefix), tenant_of(trigger)
    waiting = waiting_suspects(redis, settings, tenant)
    if not waiting:
        redis.srem(keys.extraction_suspect_tenants(), tenant)
        return "nothing waits"
    if not my_turn(redis, settings, trigger):
        schedule_repair(redis, settings, trigger, REPAIR_WAIT_S)
        return "waits for its tenant's repair"
    oldest = min(s.at for s in waiting.values())
    if _user_busy(redis, settings, trigger) and time.time() - oldest < settings.phase2_deadline_s:
        schedule_repair(redis, settings, trigger, REPAIR_WAIT_S)
        return "waits: commits of its user run"
    budget = keys.extraction_repair_starts(tenant)
    started = [float(pair[1]) for pair in redis.zrange(budget, 0, -1, withscores=True)]
    wait = repair_budget_wait(started, time.time(), settings.extraction_repairs_per_hour)
    if wait is None:
        return "repairs are off"
    if wait > 0:
        log.info(
            "%d suspected lost extractions of user %s wait %.0f s for the hourly repair budget (%d)",
            len(waiting),
            tenant,
            wait,
            settings.extraction_repairs_per_hour,
        )
        schedule_repair(redis, settings, trigger, wait + 1)
        return "waits for its user's hourly repair budget"
    pool_ids = repair_pool([(cid, s.request.agent_id, s.at, s.chars) for cid, s in waiting.items()])
    repair_sid = repair_session_id(pool_ids[0], waiting[pool_ids[0]].attempt)
    pool_key = keys.extraction_repair_pool(repair_sid)
    redis.set(
        pool_key, msgspec.json.encode([waiting[cid] for cid in pool_ids]), nx=True, ex=settings.session_state_ttl_s
    )
    pool_ids = [s.request.commit_id for s in pooled(redis, settings, repair_sid)]
    pool = [waiting[cid] for cid in pool_ids if cid in waiting]
    if not pool:  # every one claimed by a run before this one
        redis.hdel(keys.extraction_suspects(tenant), *pool_ids)
        return "repaired already"
    archives = _archives(ctx, pool)
    if not archives:
        schedule_repair(redis, settings, trigger, REPAIR_WAIT_S)
        return "archives unreadable"
    first = pool[0].request
    try:
        ctx.run(lambda: _write_repair_session(ctx, first, repair_sid, archives))
    except OVError as exc:
        log.warning("repair session %s not written: %s; trying again later", repair_sid, exc)
        schedule_repair(redis, settings, trigger, REPAIR_WAIT_S)
        return "repair session not written"
    repair = request_commit(
        redis, settings, SessionAddress(repair_sid, first.agent_id, first.user), reason="manual", keep_recent_count=0
    )
    claim(redis, settings, pool, repair)
    redis.hdel(keys.extraction_suspects(tenant), *pool_ids)
    log.info(
        "%d commits of user %s wrote no memories beside another of their user (OV merges those: lost, or "
        "nothing to remember?): what the user said in them (%d characters) is extracted again alone in "
        "session %s (commit %s)",
        len(pool),
        tenant,
        sum(len(m.text) for m in archives),
        repair_sid,
        repair.commit_id,
    )
    if len(waiting) > len(pool):
        schedule_repair(redis, settings, trigger, REPAIR_WAIT_S)
    return f"repairing {len(pool)}"


def pooled(redis: redis_lib.Redis, settings: Settings, repair_sid: str) -> list[Suspect]:
    """The suspects the repair session ``repair_sid`` takes (fixed before it is written)."""
    raw = redis.get(Keys(settings.key_prefix).extraction_repair_pool(repair_sid))
    try:
        return msgspec.json.decode(raw, type=list[Suspect]) if raw is not None else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return []


def suspect_again(redis: redis_lib.Redis, settings: Settings, repair: CommitRequest) -> tuple[int, int]:
    """The suspects ``repair`` took wait for another repair (a fresh session), unless they were
    tried ``REPAIR_ATTEMPTS`` times: (waiting again, given up). Only those whose claim still
    names ``repair`` (a verdict run twice moves none twice)."""
    keys, tenant = Keys(settings.key_prefix), tenant_of(repair)
    again = given_up = 0
    for entry in pooled(redis, settings, repair.ov_session_id):
        claim_key = keys.extraction_repair(entry.request.commit_id)
        if optional_text(redis.get(claim_key)) != repair.commit_id:
            continue
        if entry.attempt + 1 >= REPAIR_ATTEMPTS:
            given_up += 1
            continue
        retried = msgspec.structs.replace(entry, attempt=entry.attempt + 1)
        redis.hsetnx(keys.extraction_suspects(tenant), entry.request.commit_id, encode(retried))
        redis.delete(claim_key)
        again += 1
    if again:
        redis.expire(keys.extraction_suspects(tenant), settings.session_state_ttl_s)
        redis.sadd(keys.extraction_suspect_tenants(), tenant)
        schedule_repair(redis, settings, repair, REPAIR_WAIT_S)
    return again, given_up


def record_start(redis: redis_lib.Redis, settings: Settings, tenant: str, repair: CommitRequest) -> None:
    """Count a repair commit against its user's hourly budget, and in the deployment's total."""
    keys, at = Keys(settings.key_prefix), repair.requested_at
    pipe = redis.pipeline(transaction=False)
    pipe.zadd(keys.extraction_repair_starts(tenant), {repair.commit_id: at})
    pipe.zremrangebyscore(keys.extraction_repair_starts(tenant), 0, at - REPAIR_BUDGET_WINDOW_S)
    pipe.expire(keys.extraction_repair_starts(tenant), int(REPAIR_BUDGET_WINDOW_S))
    pipe.incr(keys.extraction_repairs_started())
    pipe.execute()
    TALLY.add(repair.user, "repairs")


def suspects_waiting(redis: redis_lib.Redis, settings: Settings) -> int:
    """Suspected lost extractions waiting for a repair, over every tenant."""
    keys = Keys(settings.key_prefix)
    tenants = [text(t) for t in redis.smembers(keys.extraction_suspect_tenants())]
    if not tenants:
        return 0
    pipe = redis.pipeline(transaction=False)
    for tenant in tenants:
        pipe.hlen(keys.extraction_suspects(tenant))
    return sum(int(n) for n in pipe.execute())


def _user_busy(redis: redis_lib.Redis, settings: Settings, trigger: CommitRequest) -> bool:
    """Whether a commit of ``trigger``'s user (not a repair: those take turns) is in flight."""
    return any(
        r.user == trigger.user and not is_repair_session(r.ov_session_id)
        for r in in_flight_requests(redis, settings, BUSY_READ)
    )


def my_turn(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> bool:
    """Whether no other repair of ``request``'s tenant is unfinished (then this one may go)."""
    held = redis.get(Keys(settings.key_prefix).extraction_repair_turn(tenant_of(request)))
    if held is None:
        return True
    try:
        other = decode(held, CommitRequest)
    except EventDecodeError:
        return True
    outcome = CommitRecords(redis, settings).outcome(other)
    return outcome is None or outcome.status in FINAL_STATUSES


def claim(redis: redis_lib.Redis, settings: Settings, pool: list[Suspect], repair: CommitRequest) -> None:
    """Record the repair: each suspect's claim (once per archive), the tenant's turn, its budget
    and the list (the count waits for the repair's verdict)."""
    keys, ttl, tenant = Keys(settings.key_prefix), settings.session_state_ttl_s, tenant_of(repair)
    redis.set(keys.extraction_repair_turn(tenant), encode(repair), ex=int(settings.phase2_deadline_s) + 60)
    claimed = [
        s for s in pool if redis.set(keys.extraction_repair(s.request.commit_id), repair.commit_id, nx=True, ex=ttl)
    ]
    if not claimed:
        return  # a run before this one claimed them (and counted the start)
    record_start(redis, settings, tenant, repair)
    for s in claimed:
        entry = RepairEntry(
            commit_id=s.request.commit_id,
            ov_session_id=s.request.ov_session_id,
            agent_id=s.request.agent_id,
            user=s.request.user,
            archive_uri=s.archive_uri,
            repair=repair,
            at=repair.requested_at,
        )
        redis.xadd(keys.extraction_repairs(), {"e": encode(entry)}, maxlen=REPAIRS_LISTED, approximate=True)


def _archives(ctx: JobContext, pool: list[Suspect]) -> list[OVMessage]:
    """The pooled archives' user messages, in pool order; an archive unreadable is left out (said)."""
    messages: list[OVMessage] = []
    for entry in pool:
        try:
            messages.extend(repair_messages(ctx.run(partial(_archive, ctx, entry))))
        except OVError as exc:
            log.warning(
                "commit %s: archive %s unreadable for its repair: %s", entry.request.commit_id, entry.archive_uri, exc
            )
    return messages


async def _archive(ctx: JobContext, entry: Suspect) -> list[OVMessage]:
    request = entry.request
    archive_id = entry.archive_uri.rstrip("/").rsplit("/", 1)[-1]
    return (await ctx.ov(request.address).get_archive(request.ov_session_id, archive_id)).messages


async def _write_repair_session(
    ctx: JobContext, request: CommitRequest, repair_sid: str, messages: list[OVMessage]
) -> None:
    """The pooled user messages into the repair session, unless a run before wrote them."""
    ov = ctx.ov(request.address)
    try:
        state = await ov.get_session(repair_sid)
        written = state.message_count + state.commit_count
    except OVError as exc:
        if exc.code != "NOT_FOUND":
            raise
        written = 0
    if not written:
        await ov.add_messages(repair_sid, messages)
