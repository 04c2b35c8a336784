"""A lost memory extraction, and what repairs it (pure).

Commits of one OV user run side by side: OV 0.5.2 batches the phase 2s of one user and asks
the model to merge the extractions that overlap (docs/OV-NOTES.md). A model that loses that
merge makes every task of the batch complete with no memories, although each archive held
what the user said. Only a phase 2 that overlapped another of the same user can lose to that
merge (OV merges only a batch that spans sessions: ``_requests_span_sessions``); a lone one
that wrote nothing had nothing worth writing. Such a commit is suspected by its outcome
(``completed``, no memories), the overlap (``overlapped``) and its archive (substantive user
text: ``lost_extraction``). Nothing in OV's answer tells a lost merge from a conversation with
nothing worth remembering, and most are the latter, so a repair costs one more phase 2 (a model
call) each time: the suspects of one user wait and are repaired together, the archives' user
messages (``repair_messages``) of up to ``REPAIR_POOL_MAX`` of them (``repair_pool``) written to
one repair session of the same user and agent (``repair_session_id``, derived from the oldest
suspect so a rerun finds the same one), committed alone, at most ``extraction_repairs_per_hour``
times an hour per user (``repair_budget_wait``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from core.ov.messages import OVMessage, text_message

REPAIR_SESSION_PREFIX = "ovstream-repair-"
SUBSTANTIVE_MIN_WORDS = 4
"""User text of fewer words (a greeting, "ok") is no extraction's loss."""
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


REPAIR_ATTEMPTS = 3
"""Repairs tried for one suspect whose repair wrote nothing while overlapping another commit of
its user (the merge may have lost it again); then it is given up (said at WARNING)."""


def repair_session_id(commit_id: str, attempt: int = 0) -> str:
    """The OV session that repairs ``commit_id``'s extraction (the oldest of a pool) at its
    ``attempt``-th try: one per commit and try, so a rerun finds the same one."""
    named = commit_id if attempt == 0 else f"{commit_id}#{attempt}"
    return REPAIR_SESSION_PREFIX + hashlib.sha256(named.encode("utf-8")).hexdigest()[:24]


def is_repair_session(ov_session_id: str) -> bool:
    """A repair's own commit is never repaired in turn."""
    return ov_session_id.startswith(REPAIR_SESSION_PREFIX)


def user_text(messages: Sequence[OVMessage]) -> str:
    return "\n".join(m.text for m in messages if m.role == "user" and m.text.strip())


def substantive(text: str) -> bool:
    """Whether user text says enough to extract from: a few words (CJK characters count as words)."""
    return len(_WORD.findall(text)) + len(_CJK.findall(text)) >= SUBSTANTIVE_MIN_WORDS


OVERLAP_MARGIN_S = 10.0
"""OV's batch window (``max_wait_seconds``): phase 2s this close in time may share a batch."""


def overlapped(
    mine: tuple[float, float], others: Sequence[tuple[float, float | None]], margin_s: float = OVERLAP_MARGIN_S
) -> bool:
    """Whether the commit that ran over ``mine`` (asked for, final) overlapped, give or take OV's
    batch window (``margin_s``), any of ``others`` (another commit of the same OV user: asked
    for, final or None while it runs)."""
    start, end = mine
    return any(o_start <= end + margin_s and (o_end is None or o_end >= start - margin_s) for o_start, o_end in others)


def lost_extraction(status: str, memories_extracted: int | None, archive: Sequence[OVMessage]) -> bool:
    """A completed phase 2 that wrote no memory while its archive held substantive user text.
    (``memories_extracted`` None: OV did not say, so nothing is known to be lost.)"""
    return status == "completed" and memories_extracted == 0 and substantive(user_text(archive))


def repair_messages(archive: Sequence[OVMessage]) -> list[OVMessage]:
    """What the repair session is given: the archive's user messages, as text."""
    return [text_message("user", m.text) for m in archive if m.role == "user" and m.text.strip()]


REPAIR_BUDGET_WINDOW_S = 3600.0
"""The window of ``extraction_repairs_per_hour``."""
REPAIR_POOL_MAX = 200
"""Most suspected extractions one repair session takes (the rest wait for the next)."""
REPAIR_POOL_CHARS = 80_000
"""Most user text one repair session takes, in characters (about one commit's 20k tokens), but
never less than the oldest suspect's."""


def repair_budget_wait(started: Sequence[float], now: float, per_hour: int) -> float | None:
    """Seconds until another repair of one user may start, given when its repairs started
    (``started``): 0 while fewer than ``per_hour`` started within the hour, else until the
    oldest of the newest ``per_hour`` leaves it. None: repairs are off (``per_hour`` 0)."""
    if per_hour <= 0:
        return None
    recent = sorted(t for t in started if t > now - REPAIR_BUDGET_WINDOW_S)
    if len(recent) < per_hour:
        return 0.0
    return max(0.0, recent[-per_hour] + REPAIR_BUDGET_WINDOW_S - now)


def repair_pool(
    waiting: Sequence[tuple[str, str, float, int]], most: int = REPAIR_POOL_MAX, most_chars: int = REPAIR_POOL_CHARS
) -> list[str]:
    """Which suspected extractions, given as (commit id, agent id, suspected at, characters the
    user said), one repair session takes: the oldest one's agent's (a repair session belongs to
    one user and agent), oldest first, at most ``most`` and ``most_chars`` (the oldest always)."""
    if not waiting:
        return []
    ordered = sorted(waiting, key=lambda w: (w[2], w[0]))
    agent, chars = ordered[0][1], 0
    taken: list[str] = []
    for commit_id, agent_id, _, size in ordered:
        if agent_id != agent:
            continue
        if taken and (len(taken) >= most or chars + size > most_chars):
            break
        taken.append(commit_id)
        chars += size
    return taken
