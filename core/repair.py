"""A lost memory extraction, and what repairs it (pure).

Commits of one OV user run side by side: OV 0.5.2 batches the phase 2s of one user and asks
the model to merge the extractions that overlap (docs/OV-NOTES.md). A model that loses that
merge makes every task of the batch complete with no memories, although each archive held
what the user said. Only a phase 2 that overlapped another of the same user can lose to that
merge (OV merges only a batch that spans sessions: ``_requests_span_sessions``); a lone one
that wrote nothing had nothing worth writing. Such a commit is found by its outcome
(``completed``, no memories), the overlap (``overlapped``) and its archive (substantive user
text: ``lost_extraction``), and repaired once per archive: the
archive's user messages (``repair_messages``) are written to a repair session of the same
user and agent (``repair_session_id``, derived from the commit so a rerun finds the same
one), which is committed alone.
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


def repair_session_id(commit_id: str) -> str:
    """The OV session that repairs ``commit_id``'s extraction (one per commit, so per archive)."""
    return REPAIR_SESSION_PREFIX + hashlib.sha256(commit_id.encode("utf-8")).hexdigest()[:24]


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


def overlapped(mine: tuple[float, float], others: Sequence[tuple[float, float | None]]) -> bool:
    """Whether the commit that ran over ``mine`` (asked for, final) overlapped, give or take OV's
    batch window, any of ``others`` (another commit of the same OV user: asked for, final or
    None while it runs)."""
    start, end = mine
    return any(
        o_start <= end + OVERLAP_MARGIN_S and (o_end is None or o_end >= start - OVERLAP_MARGIN_S)
        for o_start, o_end in others
    )


def lost_extraction(status: str, memories_extracted: int | None, archive: Sequence[OVMessage]) -> bool:
    """A completed phase 2 that wrote no memory while its archive held substantive user text.
    (``memories_extracted`` None: OV did not say, so nothing is known to be lost.)"""
    return status == "completed" and memories_extracted == 0 and substantive(user_text(archive))


def repair_messages(archive: Sequence[OVMessage]) -> list[OVMessage]:
    """What the repair session is given: the archive's user messages, as text."""
    return [text_message("user", m.text) for m in archive if m.role == "user" and m.text.strip()]
