"""Where OpenViking 0.5 keeps things, as ovstream relies on it (``core.ov.version.SPOKEN``).

OV's layout is not in its HTTP contract's routes, so every rule ovstream reads out of it sits
here, beside the version it was read from: how many messages OV stores for one sent, a
memory's URI, the memory categories, where a session's archives are and what the n-th one
is called, the per-user and per-agent memory roots recall searches, and the batch route's
limit. A new OV release that moves any of them changes this module (and its contract tests,
``tests/integration``), not its users.
"""

from __future__ import annotations

import re

from core.ov.messages import OVMessage, ToolPart

BATCH_LIMIT = 100
"""Most messages the batch route takes in one request (``ovBatchMax`` is at most this)."""

MEMORY_URI = re.compile(
    r"^viking://(?:user/(?P<user>[^/]+)|~)/(?:peers/[^/]+/)?memories(?:/|$)"
    r"|^viking://agent/(?:[^/]+/)?memories(?:/|$)"
)
"""What a memory lives under: the user's memories, the user's memories about one agent
(peer), spelled out or with the ``~`` home alias; and the agent space's legacy directory."""

MEMORY_CATEGORIES = frozenset(
    {
        "profile",
        "preferences",
        "entities",
        "events",
        "cases",
        "patterns",
        "tools",
        "skills",
        "trajectories",
        "experiences",
    }
)
"""The memory sub-directories OV extracts into (OV's own ``openviking/core/directories.py``), and the profile."""

USER_MEMORIES_URI = "viking://~/memories"
"""The calling user's memories (``~`` is the caller's user space)."""


def agent_memories_uri(agent_id: str) -> str:
    """The calling user's memories about agent (peer) ``agent_id``."""
    return f"viking://~/peers/{agent_id}/memories"


def history_uri(ov_session_id: str, archive_id: str | None = None) -> str:
    """Where a session's archives are, as the caller's (``~``) URI; one archive's with ``archive_id``."""
    base = f"viking://~/sessions/{ov_session_id}/history"
    return f"{base}/{archive_id}" if archive_id else base


def archive_id(n: int) -> str:
    """The name of a session's ``n``-th archive (1-based): one per commit that archived."""
    return f"archive_{n:03d}"


ARCHIVE_ID = re.compile(r"archive_\d+")
"""An archive's name (``archive_id``) found in a URI or a text."""


def ov_message_count(message: OVMessage) -> int:
    """How many messages OV stores for one message we send: a user message made only of tool
    parts is split into one message per part; every other message is stored as one."""
    parts = message.parts
    if message.role == "user" and len(parts) > 1 and all(isinstance(p, ToolPart) for p in parts):
        return len(parts)
    return 1
