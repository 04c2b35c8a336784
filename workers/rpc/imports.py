"""``POST /v1/import/outcomes``: what capture did with the imports of one run of
``openclaw ovstream import`` (workers.store.imports), so that the command says what is new to
OV, what was already there and what was partly there, not only what it sent. Each session is
resolved as any call's (its key names the agent; the caller's OV key, the tenant): a caller
reads only its own tenant's records.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Scope

from workers.rpc.assemble_http import caller_of
from workers.rpc.context import Services
from workers.rpc.models import SESSION_ID_MAX
from workers.rpc.subagents import Identity
from workers.store.imports import read_import_records

IMPORTS_ASKED_MAX = 1_000
"""Sessions one request may ask about: the command's page (``OUTCOMES_PAGE`` in the plugin's
history.ts). Each costs a caller's resolution and two Redis reads, and one answer is one
event-loop turn: 10,000 long ids were 2 MB of JSON and seconds of a loop every caller shares
(schemathesis timed one out on a loaded machine)."""


class ImportedSession(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sessionId: str = Field(..., min_length=1, max_length=SESSION_ID_MAX)
    sessionKey: str | None = Field(None, max_length=SESSION_ID_MAX)
    agentId: str | None = Field(None, max_length=SESSION_ID_MAX)
    eventId: str = Field(..., min_length=1, max_length=SESSION_ID_MAX)


class ImportOutcomesRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run: str = Field(..., min_length=1, max_length=200, description="The import run (its events' import_run).")
    sessions: list[ImportedSession] = Field(..., max_length=IMPORTS_ASKED_MAX)


class ImportOutcome(BaseModel):
    eventId: str
    outcome: Literal["written", "partly", "already", "pending"]
    """pending: capture has not applied this run's entry yet (or it was not this run's)."""
    messages: int = 0
    known: bool = False
    """Capture keeps the session's state: an import of it now writes nothing (a dry run's answer)."""


class ImportOutcomesResponse(BaseModel):
    outcomes: list[ImportOutcome]


async def import_outcomes(svc: Services, body: ImportOutcomesRequest, scope: Scope) -> dict[str, Any]:
    wanted = []
    for s in body.sessions:
        identity = Identity(s.sessionId, s.sessionKey, {"agentId": s.agentId} if s.agentId else None)
        wanted.append((caller_of(svc, scope, identity).address(), s.eventId))
    records = await read_import_records(svc.redis, svc.settings, wanted)
    outcomes = []
    for s, (record, known) in zip(body.sessions, records):
        outcome: str
        if record is not None and record.run == body.run:
            outcome, messages = record.outcome, record.messages
        else:  # none yet, or another run's: not this run's answer
            outcome, messages = "pending", 0
        outcomes.append({"eventId": s.eventId, "outcome": outcome, "messages": messages, "known": known})
    return {"outcomes": outcomes}
