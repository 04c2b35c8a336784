"""What each console page shows, read from Redis: the deployment (``read_status``, the lag
samples, the dead letters) and one session (its last answer and recall, its snapshot, its
commits and its lineage). ``GET /v1/sessions/inspect`` answers the same view as JSON."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import msgspec
import redis as redis_lib

from core.config import Settings
from core.events import CommitOutcome, ContextSnapshot, EventDecodeError
from core.ids import ov_session_id, resolve_agent_id
from core.session import SessionAddress
from workers.commits.api import CommitRecords
from workers.rpc.context import RpcError, Services
from workers.status import DeploymentStatus, LagSample, read_lag_history, read_status
from workers.store.dead_letters import (
    DeadLetter,
    drop_dead_letters,
    find_dead_letter,
    list_dead_letters,
    replay_dead_letters,
    replay_summary,
)
from workers.store.lineage import Lineage, lineage_address, read_lineage
from workers.store.recent import RecentSession, find_sessions, read_recent
from workers.store.snapshots import read_snapshot
from workers.store.traces import AssembleTrace, RecallTrace, read_assemble_trace, read_recall_trace

DEAD_LETTERS_SHOWN = 50
DEAD_LETTERS_READ = 1000
"""Dead letters read to find a tenant-scoped caller's (oldest first)."""
Tenants = frozenset[str | None] | None
"""The tenants a caller sees (workers.rpc.auth.visible_tenants); None: all."""

REASONS = {
    "assembled": "the session's snapshot (archive overview and recent turns), trimmed to the budget",
    "lag_overlay": "the snapshot plus turns published after it, which capture had not applied yet",
    "recalled": "the caller's messages with the recall block prepended (transform-context call)",
    "session_not_found": "OV has no such session yet: the caller's messages as they came",
    "no_ov_data": "OV holds nothing of the session yet and no turn waits: the caller's messages",
    "ov_unavailable": "OV unreachable: the caller's messages as they came",
    "assemble_timeout": "no answer within assembleTimeoutS: the caller's messages as they came",
    "session_bypassed": "the session matches bypassSessionPatterns: ovstream stays out of it",
    "no_recall_hits": "recall found no memory above recallScoreThreshold: the caller's messages as they came",
    "latest_not_user": "the latest message is not the user's (a tool round): nothing to recall for",
}
"""Why an answer is what it is, in words (other passthrough reasons are shown by name)."""


@dataclass(frozen=True, slots=True)
class DeploymentView:
    status: DeploymentStatus
    lag: list[LagSample]
    dead_letters: list[DeadLetter]


def read_deployment(client: redis_lib.Redis, settings: Settings, tenants: Tenants) -> DeploymentView:
    """The deployment page's figures (sync: run in a thread); of the dead letters, those of
    ``tenants`` (None: all)."""
    letters = list_dead_letters(client, settings, limit=DEAD_LETTERS_SHOWN if tenants is None else DEAD_LETTERS_READ)
    return DeploymentView(
        status=read_status(client, settings),
        lag=read_lag_history(client, settings),
        dead_letters=[d for d in letters if tenants is None or _tenant_of(d) in tenants][:DEAD_LETTERS_SHOWN],
    )


_NO_TENANT = object()


def _tenant_of(letter: DeadLetter) -> object:
    """The tenant of a dead letter's turn (a letter that does not decode belongs to none)."""
    try:
        return letter.event().user
    except (EventDecodeError, ValueError):
        return _NO_TENANT


def act_on_letters(
    client: redis_lib.Redis, settings: Settings, tenants: Tenants, action: str, ids: list[str] | None
) -> str:
    """Replay or drop the dead letters ``ids`` (None: all) the caller sees, and say what was
    done in one line. An id of another tenant's letter is answered as one that does not exist."""
    missing: list[str] = []
    if ids is None:
        letters = list_dead_letters(client, settings, limit=settings.dead_letter_maxlen)
        ids = [d.dlq_id for d in letters if tenants is None or _tenant_of(d) in tenants]
    else:
        found = {i: find_dead_letter(client, settings, i) for i in dict.fromkeys(ids)}
        missing = [i for i, d in found.items() if d is None or (tenants is not None and _tenant_of(d) not in tenants)]
        ids = [i for i in found if i not in missing]
    try:
        if action == "drop":
            dropped = drop_dead_letters(client, settings, ids)
            released = sum(1 for _, note in dropped if "released" in note)
            said = f"{len(dropped)} dropped" + (f" ({released} session(s) released)" if released else "")
        else:
            said = replay_summary(replay_dead_letters(client, settings, ids)) if ids else "0 replayed"
    except KeyError as exc:  # handled by someone else between the look and the act
        said = f"dead letter {exc.args[0]} is gone meanwhile (reload the page)"
    if missing:
        said += f"; {len(missing)} not found: {', '.join(missing[:5])}"
    return said


class SessionView(msgspec.Struct, kw_only=True):
    """One session as the inspector shows it."""

    ov_session_id: str
    agent_id: str
    tenant: str | None
    session_key: str | None
    assembled: AssembleTrace | None = None
    assembled_recall: AssembleTrace | None = None
    """What the last recall call (transform-context) answered: its injected block."""
    recalled: RecallTrace | None = None
    snapshot: SnapshotFacts | None = None
    commits: list[CommitOutcome] = msgspec.field(default_factory=list)
    lineage: LineageFacts | None = None
    now: float = msgspec.field(default_factory=time.time)
    others: list[RecentSession] = msgspec.field(default_factory=list)
    """Other agents or tenants the same session id has (named by its id alone)."""


class SnapshotFacts(msgspec.Struct, kw_only=True):
    applied_stream_id: str
    refreshed_at: float
    messages: int
    estimated_tokens: int
    total_archives: int
    archive_overview: str


class LineageFacts(msgspec.Struct, kw_only=True):
    parent: str
    parent_key: str
    mode: str
    prepared_at: float
    fork_at: int | None
    ended_at: float | None
    end_reason: str | None


async def inspect_session(
    svc: Services,
    tenants: Tenants,
    *,
    session_key: str | None,
    session_id: str | None,
    agent: str | None,
    user: str | None,
) -> SessionView:
    """The session a console query names, as the inspector shows it. Named by its id alone,
    it is looked up among the agents and tenants that have it (the most recent first); a
    session of a tenant the caller does not see answers as an unknown one."""
    if not user and tenants is not None and len(tenants) == 1:
        user = next(iter(tenants))  # a credential of one tenant: its sessions by default
    address = session_address(svc.settings, session_key=session_key, session_id=session_id, agent=agent, user=user)
    found: list[RecentSession] = []
    if session_id and not session_key and not agent:
        found = await asyncio.to_thread(find_sessions, svc.commit_redis, svc.settings, address.ov_session_id, tenants)
        found = [f for f in found if not user or f.tenant == user]
        if found:
            address, session_key = found[0].address, found[0].session_key
    if tenants is not None and address.tenant not in tenants:
        return _unknown(address, session_key)
    view = await read_session(svc, address, session_key, by_key=not session_id)
    view.others = found[1:]
    return view


def _unknown(address: SessionAddress, session_key: str | None) -> SessionView:
    """What an unknown session shows: its name, nothing else."""
    return SessionView(
        ov_session_id=address.ov_session_id, agent_id=address.agent_id, tenant=address.tenant, session_key=session_key
    )


def recent_sessions(client: redis_lib.Redis, settings: Settings, tenants: Tenants) -> list[RecentSession]:
    """The sessions assemble answered most recently, of the tenants the caller sees."""
    return read_recent(client, settings, tenants, limit=RECENT_SHOWN)


RECENT_SHOWN = 50


def session_address(
    settings: Settings, *, session_key: str | None, session_id: str | None, agent: str | None, user: str | None
) -> SessionAddress:
    """The session a console query names (by key, by id, or both), with the agent the key
    names unless ``agent`` says otherwise; a 422 when it names none."""
    if not session_key and not session_id:
        raise RpcError(422, "session_required", "name a session: its key or its id", "sessionKey")
    try:
        sid = ov_session_id(session_id or "", session_key)
    except ValueError as exc:  # a key of blanks names nothing (schemathesis found the 500)
        raise RpcError(422, "session_required", str(exc), "sessionKey") from None
    return SessionAddress(sid, resolve_agent_id(session_key, agent or None, settings.agent_prefix), user or None)


async def read_session(
    svc: Services, address: SessionAddress, session_key: str | None, *, by_key: bool = False
) -> SessionView:
    """Everything the inspector shows of one session, read at once. ``by_key``: named by its
    key alone, which names the session the host's latest answer under that key was for."""
    if by_key and session_key:
        latest = await read_assemble_trace(svc.redis, svc.keys.session(address, svc.settings.shards).assembled)
        if latest is not None and latest.ov_session_id != address.ov_session_id:
            address = SessionAddress(latest.ov_session_id, address.agent_id, address.tenant)
    keys = svc.keys.session(address, svc.settings.shards)
    records = CommitRecords(svc.commit_redis, svc.settings)
    assembled, assembled_recall, recalled, snapshot, lineage, commits = await asyncio.gather(
        read_assemble_trace(svc.redis, keys.assembled),
        read_assemble_trace(svc.redis, keys.assembled_recall),
        read_recall_trace(svc.redis, keys.recalled),
        read_snapshot(svc.redis, svc.settings, address),
        read_lineage(svc.redis, svc.settings, lineage_address(session_key, address)),
        asyncio.to_thread(records.list, address),
    )
    return SessionView(
        ov_session_id=address.ov_session_id,
        agent_id=address.agent_id,
        tenant=address.tenant,
        session_key=session_key,
        assembled=assembled,
        assembled_recall=assembled_recall,
        recalled=recalled,
        snapshot=None if snapshot is None else _snapshot_facts(snapshot),
        commits=list(reversed(commits)),  # newest first
        lineage=None if lineage is None else _lineage_facts(lineage),
    )


def _snapshot_facts(s: ContextSnapshot) -> SnapshotFacts:
    return SnapshotFacts(
        applied_stream_id=s.applied_stream_id,
        refreshed_at=s.refreshed_at,
        messages=len(s.messages),
        estimated_tokens=s.estimated_tokens,
        total_archives=s.total_archives,
        archive_overview=s.latest_archive_overview,
    )


def _lineage_facts(lineage: Lineage) -> LineageFacts:
    return LineageFacts(
        parent=lineage.parent,
        parent_key=lineage.parent_key,
        mode=lineage.mode,
        prepared_at=lineage.prepared_at,
        fork_at=lineage.fork_at,
        ended_at=lineage.ended_at,
        end_reason=lineage.end_reason,
    )


def as_json(view: SessionView) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(view)
    return out
