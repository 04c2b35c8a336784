"""``POST /v1/erase``: a caller erases its own tenant, one of its agents or one of its sessions
(workers.erasure.run), with the receipt as the answer. The tenant is the one the caller's
credential acts as (its OV key: ``X-OpenViking-API-Key`` or its credential's own), as for every
other call, so a caller reaches no other tenant's data. It runs on a thread beside the loop
(seconds: a pause for capture to see the tombstone, two passes)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Scope

from core.erasure import ErasureScope
from core.ids import ov_session_id
from workers.erasure.run import erase_with
from workers.rpc.assemble_http import caller_of
from workers.rpc.context import RpcError, Services
from workers.rpc.models import SESSION_ID_MAX


class EraseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agentId: str | None = Field(None, min_length=1, max_length=SESSION_ID_MAX, description="Only this agent's.")
    sessionId: str | None = Field(None, min_length=1, max_length=SESSION_ID_MAX, description="Only this session.")
    sessionKey: str | None = Field(None, max_length=SESSION_ID_MAX, description="The session's key (its OV id).")
    dryRun: bool = Field(False, description="Count what would go; change nothing.")


class EraseReceipt(BaseModel):
    scope: str
    kind: str
    digest: str
    dry_run: bool
    removed: dict[str, int]
    started_at: float
    finished_at: float
    runs: int


async def erase_route(svc: Services, body: EraseRequest, scope: Scope) -> dict[str, Any]:
    caller = caller_of(svc, scope, {}, session_required=False)
    if body.agentId and body.sessionId:
        raise RpcError(
            400, "bad_scope", "name agentId or sessionId, not both (a session belongs to one agent)", "agentId"
        )
    session = None
    if body.sessionId:
        try:
            session = ov_session_id(body.sessionId, body.sessionKey)
        except ValueError as exc:
            raise RpcError(400, "bad_session", str(exc), "sessionId") from None
    erasure = ErasureScope(caller.tenant, agent=body.agentId, session=session)
    by = f"rpc:{caller.tenant or '-'}"
    receipt = await asyncio.to_thread(
        erase_with,
        svc.settings,
        erasure,
        caller.api_key,
        dry_run=body.dryRun,
        requested_by=by,
        transport=svc.ov_transport,
    )
    return receipt.as_json()  # type: ignore[no-any-return]
