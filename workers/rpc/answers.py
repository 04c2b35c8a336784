"""What assemble answers (workers.rpc.assemble), as kept: an assembled context with its body
encoded once (``Answered``), a recall call's messages with the block it injected
(``Recalled``), and the trace the console's inspector shows of each (``keep_trace``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from core.assemble_plan import FullContext
from core.defaults import DEFAULT_TOKEN_BUDGET
from core.messages.tokens import estimate_message_tokens
from workers.rpc.context import Caller, Services
from workers.rpc.models import AssembleRequest
from workers.rpc.responses import encode_body


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recall call's answer: the caller's messages with ``block`` before the latest user's."""

    body: dict[str, Any]
    block: str


@dataclass(frozen=True, slots=True)
class Answered:
    """An assembled context with its answer body encoded once: a cached result (the same
    snapshot, budget and recall block) is answered with these bytes, not encoded again."""

    context: FullContext
    body: msgspec.Raw
    snapshot_id: str | None = None
    """The stream entry the snapshot it came from reflected (None: no snapshot)."""
    overlay_turns: tuple[str, ...] = ()
    """Event ids of the turns the overlay appended to the snapshot."""

    @classmethod
    def of(cls, context: FullContext, snapshot_id: str | None = None, overlay_turns: tuple[str, ...] = ()) -> Answered:
        body: dict[str, Any] = {"messages": context.messages, "estimatedTokens": context.estimated_tokens}
        if context.system_prompt_addition:
            body["systemPromptAddition"] = context.system_prompt_addition
        return cls(context, msgspec.Raw(encode_body(body)), snapshot_id, overlay_turns)


def budget_of(req: AssembleRequest) -> int:
    """The request's budget; missing or not positive: the default, as in the reference."""
    budget = req.tokenBudget
    return int(budget) if budget is not None and budget >= 1 else DEFAULT_TOKEN_BUDGET


def keep_trace(
    svc: Services, req: AssembleRequest, caller: Caller, sid: str, path: str, reason: str, outcome: object
) -> None:
    """What the console's session inspector shows of this answer (workers.rpc.traces); a
    cached answer already kept costs one dictionary lookup."""
    noted_as = f"recall\x00{sid}" if path == "recall" else sid  # a recall call's trace has a key of its own
    shown: dict[str, Any]
    mark: object
    if isinstance(outcome, Answered):  # known by its identity: a cached answer is kept once
        c, mark = outcome.context, outcome
        shown = {"messages": c.messages, "estimated_tokens": c.estimated_tokens, "session_kept": c.session_kept}
        shown |= {"overlay_messages": c.tail_count, "overlay_turns": outcome.overlay_turns}
        shown |= {"snapshot_id": outcome.snapshot_id, "system_prompt_addition": c.system_prompt_addition}
    elif isinstance(outcome, Recalled):  # what it injected
        body, block = outcome.body, outcome.block
        mark = ("recalled", len(req.messages), len(block), hash(block))
        shown = {"messages": body["messages"], "estimated_tokens": body["estimatedTokens"], "injected": block}
    else:  # the caller's own messages came back (a main call, a recall call or a bypass): say why
        mark = (reason, len(req.messages))
        shown = {"messages": req.messages, "estimated_tokens": estimate_message_tokens(req.messages)}
    if svc.traces.first_time(noted_as, mark):
        svc.traces.assembled(
            caller.address(), session_key=caller.session_key, path=path, reason=reason, budget=budget_of(req), **shown
        )
