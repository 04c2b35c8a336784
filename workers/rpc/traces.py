"""Keeping what assemble answered and what recall found, for the console's session inspector
(workers.store.traces). Off the answer's path: the trace is built and written by a task after
the answer is on its way, and an answer already kept (a cached one, by identity) is not
kept again, so a hit costs one dictionary lookup. A failed write is logged at debug level:
the inspector is a view, never a reason to fail a call."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Coroutine, Sequence
from typing import Any

import redis.asyncio as aioredis

from core.config import Settings
from core.messages.convert import content_text
from core.messages.tokens import estimate_message_tokens
from core.recall.hits import recall_category, to_hit
from core.redaction import Placeholders, Policy, redact_text
from core.session import SessionAddress
from workers.store.keys import Keys
from workers.store.lineage import lineage_address
from workers.store.recent import note_session
from workers.store.traces import AssembleTrace, MessageLine, RecalledMemory, RecallTrace, write_trace

log = logging.getLogger(__name__)

PREVIEW_CHARS = 160
"""How much of each message's text a trace keeps."""
TRACE_HEAD = 4
TRACE_TAIL = 20
"""A trace keeps the first TRACE_HEAD messages (the archive summary, the oldest turns) and
the last TRACE_TAIL (the newest): a few KB a session in Redis, whatever its length."""
INJECTED_CHARS = 2000
"""How much of a recall call's injected block a trace keeps."""
NOTED_SESSIONS = 8192
"""Sessions whose last kept answer each process remembers (to skip keeping it again)."""


def message_lines(messages: Sequence[Any], policy: Policy | None = None) -> tuple[list[MessageLine], Counter[str]]:
    """Each message's role, estimated tokens and the start of its text (of those given), the
    text redacted by ``policy`` before it is cut (a secret cut short would not match); and what
    was masked in the newest turn (from the last user message on)."""
    lines, numbers, newest = [], Placeholders(), Counter[str]()
    for m in messages:
        role = str(m.get("role", "?")) if isinstance(m, dict) else "?"
        text = content_text(m.get("content")) if isinstance(m, dict) else ""
        if not text and isinstance(m, dict) and m.get("role") == "assistant":
            text = " ".join(f"[{b.get('name', 'tool')}]" for b in m.get("content") or [] if isinstance(b, dict))
        if role == "user":
            newest = Counter()
        if policy is not None and policy.mode != "off":
            text, kinds = redact_text(text, policy.rules, numbers)
            newest.update(kinds)
        lines.append(MessageLine(role=role, tokens=estimate_message_tokens([m]), preview=text[:PREVIEW_CHARS]))
    return lines, newest


def redacted(text: str | None, policy: Policy) -> str | None:
    """``text`` as a trace may keep it (core.redaction)."""
    if text is None or policy.mode == "off":
        return text
    return redact_text(text, policy.rules, Placeholders())[0]


class TraceRecorder:
    """Keeps each session's last assemble answer and last recall (``consoleTraceTtlS``)."""

    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self._noted: dict[str, object] = {}
        """OV session id -> the identity of the answer last kept (``id`` of a cached answer, or
        a passthrough's small tuple): never the answer itself, which would keep every
        session's whole answer alive (~100 KiB a session). A plain dict: checked on every
        assemble."""
        self._tasks: set[asyncio.Task[None]] = set()
        self.enabled = settings.console_trace_ttl_s > 0

    def first_time(self, ov_session_id: str, answer: object) -> bool:
        """Whether ``answer`` is not the one last kept for the session: the same object (a
        cached answer, known by its ``id``), or an equal tuple (a passthrough's reason and
        size), is kept once. An answer freed and another made at its address would be taken
        for it: that one is not kept, and the next answer of the session is. Bounded: past
        ``NOTED_SESSIONS`` the memory starts afresh (a few answers kept twice)."""
        mark = answer if type(answer) is tuple else id(answer)
        if self._noted.get(ov_session_id) == mark:
            return False
        if len(self._noted) >= NOTED_SESSIONS:
            self._noted.clear()
        self._noted[ov_session_id] = mark
        return True

    def assembled(
        self,
        address: SessionAddress,
        *,
        session_key: str | None,
        path: str,
        reason: str,
        budget: int,
        messages: list[dict[str, Any]],
        estimated_tokens: int,
        session_kept: int = 0,
        overlay_messages: int = 0,
        overlay_turns: Sequence[str] = (),
        snapshot_id: str | None = None,
        system_prompt_addition: str | None = None,
        injected: str | None = None,
    ) -> None:
        """Keep one answer of the session (the caller asked ``first_time`` first): a recall
        call's under its own key, so it never hides the main call's answer."""
        at = time.time()
        kept = (
            messages if len(messages) <= TRACE_HEAD + TRACE_TAIL else [*messages[:TRACE_HEAD], *messages[-TRACE_TAIL:]]
        )

        async def keep() -> None:
            policy = self.settings.redaction_for(address.agent_id)
            lines, masked = message_lines(kept, policy)
            trace = AssembleTrace(
                at=at,
                ov_session_id=address.ov_session_id,
                session_key=session_key,
                path=path,
                reason=reason,
                budget=budget,
                estimated_tokens=estimated_tokens,
                messages=lines,
                message_count=len(messages),
                left_out=len(messages) - len(kept),
                session_kept=session_kept,
                overlay_messages=overlay_messages,
                overlay_turns=list(overlay_turns),
                snapshot_id=snapshot_id,
                system_prompt_addition=redacted(system_prompt_addition, policy),
                injected=None if injected is None else (redacted(injected, policy) or "")[:INJECTED_CHARS],
                masked=dict(masked),
            )
            ttl_s = self.settings.console_trace_ttl_s
            by_key = lineage_address(session_key, address)  # the address the key alone names
            for where in dict.fromkeys((address, by_key)):
                keys = self.keys.session(where, self.settings.shards)
                key = keys.assembled_recall if path == "recall" else keys.assembled
                await write_trace(self.redis, key, trace, ttl_s)
            await note_session(self.redis, self.keys, address, session_key, at, ttl_s)

        self._spawn(keep())

    def recalled(self, address: SessionAddress, query: str, hits: Sequence[Any]) -> None:
        """Keep the session's latest recall: its query and each memory's URI and score."""
        if not self.enabled:
            return
        memories = [RecalledMemory(uri=h.uri, score=h.score, category=recall_category(h)) for h in map(to_hit, hits)]
        query = redacted(query, self.settings.redaction_for(address.agent_id)) or ""
        trace = RecallTrace(at=time.time(), query=query, memories=memories)
        key = self.keys.session(address, self.settings.shards).recalled
        self._spawn(write_trace(self.redis, key, trace, self.settings.console_trace_ttl_s))

    def _spawn(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(self._quietly(write))
        self._tasks.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _quietly(write: Coroutine[Any, Any, None]) -> None:
        try:
            await write
        except Exception as exc:  # a view: never worth more than a debug line
            log.debug("console trace not kept: %s", exc)
