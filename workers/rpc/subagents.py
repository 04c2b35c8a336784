"""Subagents: the host's spawn and end of a child run, and a fork's context.

``prepareSubagentSpawn`` records the child's lineage (workers.store.lineage): its parent and
context mode, and for a fork the parent's snapshot as stored at that moment, the start of
the child's context. ``onSubagentEnded`` notes how the run ended (the plugin puts the
child's commit marker behind its turns on the stream, so that commit sees every turn, and
whatever the child found becomes memories of the agent it ran as). A spawn that failed
after it was prepared is rolled back. A forked child's main assemble (``forked``) answers
from core.fork's base instead of the child's own snapshot alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from core.fork import copied_span, fork_base, fork_captured
from core.messages.model import MessageFormatError, parse_messages
from core.session import SessionAddress
from workers.rpc.assemble_snapshot import Snap
from workers.rpc.context import Caller, Services
from workers.rpc.models import AssembleRequest, SubagentEnded, SubagentSpawn
from workers.store.lineage import (
    FORK,
    drop_spawn,
    fork_point,
    lineage_address,
    read_lineage,
    record_end,
    record_spawn,
)
from workers.store.snapshots import ZERO_ID, read_snapshot, snapshot_key

log = logging.getLogger("ovstream.rpc")


def _lineage_of(caller: Caller) -> SessionAddress:
    return lineage_address(caller.session_key, caller.address())


@dataclass(frozen=True, slots=True)
class Identity:
    """The identity fields of one session of a subagent call, as ``caller_of`` reads a body."""

    sessionId: str | None
    sessionKey: str | None
    runtimeContext: dict[str, Any] | None = None


async def prepare_spawn(svc: Services, body: SubagentSpawn, parent: Caller, child: Caller) -> dict[str, Any]:
    if child.bypassed:
        return {"ok": True}
    settings = svc.settings
    base: bytes | None = None
    if body.contextMode == FORK:  # the clients here speak bytes
        base = cast(bytes | None, await svc.redis.hget(snapshot_key(settings, parent.address()), "data"))
    await record_spawn(
        svc.redis,
        settings,
        _lineage_of(child),
        child=child.require_session() if body.childSessionId else "",
        parent=parent.require_session(),
        parent_key=body.parentSessionKey,
        child_key=body.childSessionKey,
        mode=body.contextMode,
        base=base,
    )
    log.info(
        "subagent key=%s id=%s (%s) of session %s (key %s) prepared%s",
        body.childSessionKey or "-",
        body.childSessionId or "(not named yet)",
        body.contextMode,
        parent.session_id or parent.ov_session_id,
        body.parentSessionKey or "-",
        "" if body.contextMode != FORK else " from the parent's snapshot" if base else " (the parent has no snapshot)",
    )
    return {
        "ok": True,
        "childSession": child.ov_session_id,
        "parentSession": parent.ov_session_id,
        "contextMode": body.contextMode,
        "forkBase": base is not None,
    }


async def roll_back_spawn(svc: Services, child: Caller) -> dict[str, Any]:
    known = not child.bypassed and await drop_spawn(svc.redis, svc.settings, _lineage_of(child))
    if known:
        log.info("subagent key=%s id=%s: spawn rolled back", child.session_key or "-", child.session_id or "-")
    return {"ok": True, "childSession": child.ov_session_id if known else None}


async def spawn_ended(svc: Services, body: SubagentEnded, child: Caller) -> dict[str, Any]:
    known = not child.bypassed and await record_end(
        svc.redis, svc.settings, _lineage_of(child), body.reason, child=child.ov_session_id or ""
    )
    log.info(
        "subagent key=%s id=%s ended (%s)%s",
        child.session_key or "-",
        child.session_id or "-",
        body.reason,
        "" if known else ": no spawn of it known",
    )
    return {"ok": True, "childSession": child.ov_session_id if known else None}


class ForkSnap(Snap):
    """A fork's base: what it reflects is known (the copy, and the child's own capture)."""

    @property
    def capture_known(self) -> bool:
        return True


async def fork_snap(svc: Services, req: AssembleRequest, caller: Caller) -> Snap | None:
    """The forked child's base (core.fork), None when no fork of this session is known."""
    settings, where = svc.settings, _lineage_of(caller)
    lineage = await read_lineage(svc.redis, settings, where)
    if lineage is None or lineage.mode != FORK:
        return None
    fork_at, copied_raw = lineage.fork_at, lineage.copied
    if fork_at is None:  # the first assemble of the child: the host's transcript is the copy
        start, end = copied_span(lineage.base, len(req.messages))
        fork_at, copied_raw = await fork_point(
            svc.redis, settings, where, len(req.messages), [msgspec.json.encode(m) for m in req.messages[start:end]]
        )
        log.info(
            "subagent %s (key %s): a fork of %d message(s); its context starts from %s's snapshot "
            "and the %d it did not reflect",
            caller.session_id or "-",
            caller.session_key or "-",
            fork_at,
            lineage.parent,
            end - start,
        )
    if copied_raw is None:  # recorded by a release that kept no copy: by position, as it did
        start, end = copied_span(lineage.base, min(fork_at, len(req.messages)))
        copied_raw = msgspec.json.encode(req.messages[start:end])
    child = await read_snapshot(svc.redis, settings, caller.address())
    try:
        copied = parse_messages(msgspec.json.decode(copied_raw))
    except (MessageFormatError, msgspec.DecodeError):  # written by this code; defensive
        copied = []
    base = fork_base(lineage.base, copied, child)
    applied = child.applied_stream_id if child is not None else ZERO_ID
    return ForkSnap(
        None,
        base,
        fork_captured(child, fork_at),
        applied,
        list(child.event_ids) if child is not None else [],
        list(child.advancements) if child is not None else [],
    )
