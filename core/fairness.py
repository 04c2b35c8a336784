"""Which commit job goes before which: tenants take turns, and within a tenant what a person
waits on goes first (issue 58).

One FIFO put a tenant's live ``compact`` behind every job of another tenant's burst (a bulk
import queues a thousand commits). So each job goes in a *line*, one per tenant and urgency
(``line_of``), and a worker takes the next job from the lines in ``dequeue_order``: the
tenants in turn (the one just served goes to the back: ``served``), each tenant's urgent line
before its background one. A burst then delays another tenant's job by about one job per
worker, whatever its size.

Pure: the lines' Redis keys, their registry and the worker that reads them are in
workers.commits.lines.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

URGENT_REASONS = frozenset({"compact", "manual"})
"""Commit reasons a person waits on (``compact`` blocks the host's turn; an explicit commit is
asked for and watched). The rest are background: the threshold, a session's end, a memory
stored by a tool (its commit is not awaited), imports, repairs and checks."""

URGENT, BACKGROUND = "u", "b"
"""A line's urgency, as its name ends."""

LEGACY_LINE = ""
"""The line of a job enqueued without one (releases before lines; the queue's own list): its
own turn in the rotation, so an upgrade drains what the old way queued."""


def tenant_tag(tenant: str | None) -> str:
    """A tenant's short, stable name in a line (a digest: no tenant name in a Redis key); None
    is the deployment's own user."""
    return hashlib.sha256((tenant or "").encode()).hexdigest()[:16]


def line_of(tenant: str | None, reason: str | None) -> str:
    """The line of a job of ``tenant``'s commit asked for ``reason`` (None: not a commit's own
    chain, such as a repair: background)."""
    return f"{tenant_tag(tenant)}:{URGENT if reason in URGENT_REASONS else BACKGROUND}"


def tenant_of_line(line: str) -> str:
    """The tenant part of a line's name (its tag; ``LEGACY_LINE`` is its own)."""
    return line.rpartition(":")[0] if line else LEGACY_LINE


def dequeue_order(rotation: Sequence[str], lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """The order to take jobs from ``lines`` in, and the rotation it follows.

    ``rotation``: tenants' tags, the next to serve first (from the last call). Tenants with a
    line and not in the rotation join at its front (in name order, so every worker agrees):
    they were not served lately, the others were; those with no line any more leave it. Per
    tenant, its urgent line, then its background one. The legacy line takes a turn as a tenant of its own.
    """
    by_tenant: dict[str, list[str]] = {}
    for line in lines:
        by_tenant.setdefault(tenant_of_line(line), []).append(line)
    kept = [t for t in rotation if t in by_tenant]
    known = set(kept)
    order = sorted(t for t in by_tenant if t not in known) + kept
    out: list[str] = []
    for tenant in order:
        out += sorted(by_tenant[tenant], key=lambda line: (not line.endswith(":" + URGENT), line))
    return out, order


def served(rotation: Sequence[str], line: str) -> list[str]:
    """The rotation after a job of ``line`` was taken: its tenant goes to the back."""
    tenant = tenant_of_line(line)
    return [t for t in rotation if t != tenant] + [tenant]
