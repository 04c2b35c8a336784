"""What assemble answers, decided and built without IO.

Two entry points mirror the two kinds of OpenClaw call:

- ``recall_query``: the per-LLM-call (transform-context) call; says whether
  to search memories at all, and with which query.
- ``plan_overlay`` + ``build_full_context``: the main call; from a session's
  cached OV context (a ``SessionBase``, built once per snapshot version) and
  the caller's transcript, the messages to send and their estimate.

The IO around them (Redis, OV, caching) is workers.rpc.assemble's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.budget import allocate_context_budget
from core.defaults import RECALL_QUERY_MIN_CHARS
from core.events import ContextSnapshot
from core.messages.convert import archive_summary_message, ov_to_agent_messages, trim_to_budget
from core.messages.model import AgentMessage, dump_message, dump_messages
from core.messages.pipeline import run_pipeline
from core.messages.tokens import estimate_message_tokens, estimate_tokens
from core.ov.messages import OVMessage
from core.recall.text import has_recall_marker, message_text, prepare_recall_query

_TRUNCATION_MARK = "\n…"


@dataclass(frozen=True, slots=True)
class Passthrough:
    """Answer with the caller's messages unchanged; ``reason`` is logged and counted."""

    reason: str


# --- the transform-context call ---------------------------------------------------------


def recall_query(
    messages: Sequence[Mapping[str, Any]], *, auto_recall: bool, min_chars: int = RECALL_QUERY_MIN_CHARS
) -> str | Passthrough:
    """The memory search query for the latest user message, or why there is none."""
    latest = messages[-1] if messages else None
    if not isinstance(latest, Mapping) or latest.get("role") != "user":
        return Passthrough("latest_not_user")
    if not auto_recall:
        return Passthrough("auto_recall_disabled")
    if has_recall_marker(latest):
        return Passthrough("recall_already_injected")
    query = prepare_recall_query(message_text(latest))
    if len(query) < min_chars:
        return Passthrough("recall_query_too_short")
    return query


# --- the main call ---------------------------------------------------------------------------


def session_context_guide(has_summary: bool) -> str:
    """The system prompt addition sent when the session has archives.

    It tells the model how the two layers of its history relate and that the
    archived original messages are one tool call away, so it searches them
    instead of guessing or answering "not mentioned".
    """
    lines = ["## Session Context Guide", ""]
    if has_summary:
        lines += [
            "Earlier turns of this conversation were archived. Your history now has two parts:",
            "- A user message starting with [Session History Summary]: a condensed account of",
            "  the archived turns. It keeps the gist and drops details (exact numbers, dates,",
            "  names, commands).",
            "- The messages after it: the recent turns, word for word.",
            "",
            "When the two disagree, the recent messages are newer and win. Do not invent",
            "details the summary does not state.",
        ]
    else:
        lines += [
            "Earlier turns of this conversation were archived and are not shown word for word;",
            "the messages you see are the recent turns.",
        ]
    lines += [
        "",
        "Before saying something was never mentioned, look it up in the archives:",
        "- ov_archive_search {query}: searches the archived original messages for a keyword.",
        "  Use short concrete words (a name, a number, a file), and try two or three",
        "  variants if the first finds nothing.",
        "- ov_archive_expand {archiveId}: lists every message of one archive (ids such as",
        "  archive_002 appear in search results).",
        "Conclude the information is unavailable only after both.",
    ]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class SessionBase:
    """A session's OV context converted to AgentMessages: the expensive, cacheable part.

    Built once per snapshot version; every main call of that version reuses it.
    """

    overview: str
    has_archive: bool
    record_count: int
    """OV message records in the context (before conversion)."""
    messages: tuple[AgentMessage, ...]
    suffix_tokens: tuple[int, ...]
    """suffix_tokens[k]: summed per-message estimates of messages[k:]; len(messages) + 1 entries."""

    @property
    def empty(self) -> bool:
        return not self.has_archive and self.record_count == 0


def build_session_base(
    overview: str | None,
    pre_archive_abstracts: Sequence[Any] = (),
    records: Sequence[OVMessage] = (),
    total_archives: int = 0,
) -> SessionBase:
    """Convert OV /context data (snapshot fields) once."""
    text = (overview or "").strip()
    return session_base_of(
        text,
        has_archive=bool(text) or bool(pre_archive_abstracts) or total_archives > 0,
        record_count=len(records),
        messages=ov_to_agent_messages(list(records)),
    )


def session_base_of(
    overview: str, *, has_archive: bool, record_count: int, messages: Sequence[AgentMessage]
) -> SessionBase:
    """A SessionBase of messages already converted (their per-suffix estimates made here)."""
    per_message = [estimate_message_tokens(dump_message(m)) for m in messages]
    suffix = [0] * (len(per_message) + 1)
    for i in range(len(per_message) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + per_message[i]
    return SessionBase(
        overview=overview,
        has_archive=has_archive,
        record_count=record_count,
        messages=tuple(messages),
        suffix_tokens=tuple(suffix),
    )


def snapshot_base(snapshot: ContextSnapshot) -> SessionBase:
    """``build_session_base`` of a stored snapshot."""
    return build_session_base(
        snapshot.latest_archive_overview, snapshot.pre_archive_abstracts, snapshot.messages, snapshot.total_archives
    )


@dataclass(frozen=True, slots=True)
class Overlay:
    """Append the caller's messages from ``tail_start`` on: OV has not got them yet."""

    tail_start: int


def plan_overlay(
    base: SessionBase, *, captured_through: int, capture_known: bool, input_count: int
) -> Overlay | Passthrough:
    """How the caller's transcript relates to the cached context.

    With a capture record (``capture_known``) the snapshot says exactly how
    much of the transcript OV holds: the rest is the lag tail, appended so no
    turn is lost while a worker is behind. Without one (a session OV got some
    other way) we fall back to the reference plugin's guess: fewer OV messages
    than the caller's, and no archive, means OV is incomplete, so pass through.
    """
    if base.empty:
        return Passthrough("no_ov_data")
    if capture_known:
        return Overlay(tail_start=min(max(captured_through, 0), input_count))
    if not base.has_archive and base.record_count < input_count:
        return Passthrough("ov_msgs_fewer_than_input")
    return Overlay(tail_start=input_count)


@dataclass(frozen=True, slots=True)
class FullContext:
    messages: list[dict[str, Any]]
    """OpenClaw JSON, ready to send."""
    estimated_tokens: int
    """Of the messages plus the system prompt addition."""
    system_prompt_addition: str | None
    session_kept: int
    """OV session messages kept after trimming (of len(base.messages))."""
    tail_count: int


def passthrough_with(messages: list[dict[str, Any]], recall_block: str) -> FullContext:
    """The caller's messages unchanged, with the turn's recall block as the system prompt addition."""
    return FullContext(
        messages=messages,
        estimated_tokens=estimate_message_tokens(messages) + estimate_tokens(recall_block),
        system_prompt_addition=recall_block,
        session_kept=0,
        tail_count=0,
    )


def fit_overview(overview: str, budget_tokens: int) -> str:
    """The longest head of ``overview`` whose summary message fits the budget ("" if none).

    A cut overview ends in an ellipsis line so the model knows it is partial.
    """
    if not overview or budget_tokens <= 0:
        return ""

    def cost(text: str) -> int:
        return estimate_message_tokens([dump_message(archive_summary_message(text))])

    if cost(overview) <= budget_tokens:
        return overview
    lo, hi = 0, len(overview)  # invariant: a head of lo chars fits (0 may not, checked below)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(overview[:mid].rstrip() + _TRUNCATION_MARK) <= budget_tokens:
            lo = mid
        else:
            hi = mid - 1
    head = overview[:lo].rstrip()
    return head + _TRUNCATION_MARK if head else ""


def _list_overhead(count: int) -> int:
    # "[", "]" and the commas between items, at a quarter token per character.
    return -(-(count + 1) // 4)


def system_prompt_addition(recall_block: str | None, guide: str | None) -> str | None:
    """Recalled memories first, then the Session Context Guide.

    The recall block goes into the system prompt addition, not into a message:
    the 2026.9 host keeps the current user message out of ``messages`` (it
    appends it after assemble) and prepends the addition to the system prompt
    of every model request of the run, fresh each time, so the block reaches
    the model once per request and never enters the transcript (nor OV).
    """
    parts = [p for p in (recall_block, guide) if p]
    return "\n\n".join(parts) if parts else None


def build_full_context(
    base: SessionBase,
    tail: Sequence[AgentMessage],
    token_budget: int | float | None,
    *,
    recall_block: str | None = None,
) -> FullContext | Passthrough:
    """The main call's answer: summary, OV session messages trimmed from the
    oldest to fit, then the lag tail (kept whole), through the five-step pipeline;
    the recall block and the guide go into the system prompt addition."""
    guide = session_context_guide(bool(base.overview)) if base.has_archive else None
    addition = system_prompt_addition(recall_block, guide)
    guide_tokens = estimate_tokens(addition) if addition else 0
    budget = allocate_context_budget(token_budget, guide_tokens)
    if budget.archive + budget.session <= 0:
        # A budget so small it is all output reserve: we have nothing better than
        # what the caller already holds.
        return Passthrough("budget_all_reserved")

    head: list[AgentMessage] = []
    archive_tokens = 0
    overview = fit_overview(base.overview, budget.archive)
    if overview:
        summary = archive_summary_message(overview)
        head.append(summary)
        archive_tokens = estimate_message_tokens([dump_message(summary)])

    tail = list(tail)
    tail_tokens = estimate_message_tokens(dump_messages(tail)) if tail else 0
    # The archive's unused share goes to the session, as in the reference.
    session_budget = max(budget.session + budget.archive - archive_tokens - tail_tokens, 0)
    total = len(base.messages)

    def suffix_estimate(suffix: list[AgentMessage]) -> int:
        # trim_to_budget only measures suffixes of the list, so the length names
        # the suffix; summed per-message estimates (cached) over-count by under a
        # token per message, which errs on the side of fitting.
        start = total - len(suffix)
        return base.suffix_tokens[start] + _list_overhead(len(suffix)) if suffix else 0

    session = trim_to_budget(base.messages, session_budget, suffix_estimate)
    assembled = run_pipeline([*head, *session, *tail])
    if not assembled:
        return Passthrough("assembled_empty")
    dumped = dump_messages(assembled)
    return FullContext(
        messages=dumped,
        estimated_tokens=estimate_message_tokens(dumped) + guide_tokens,
        system_prompt_addition=addition,
        session_kept=len(session),
        tail_count=len(tail),
    )
