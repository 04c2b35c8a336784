"""What an erasure covers, and its tombstone (pure).

An erasure names a tenant (``user``: the tenant label of ``userApiKeys``, or the deployment's
own user, tenant None), and optionally one agent or one session of it. Everything ovstream and
OV keep of that scope goes (workers.erasure). Turns of the scope that arrive while it runs, or
after, find its tombstone and are dropped unapplied: a tombstone keeps only a digest of the scope
(``scope_digest``), never the user id, and lives ``eraseTombstoneTtlS``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from core.session import tenant_and_agent


@dataclass(frozen=True, slots=True)
class ErasureScope:
    """A tenant, one of its agents, or one of its sessions (an OV session id)."""

    tenant: str | None
    agent: str | None = None
    session: str | None = None

    def __post_init__(self) -> None:
        if self.agent is not None and self.session is not None:
            raise ValueError("name an agent or a session, not both (a session belongs to one agent)")

    @property
    def kind(self) -> str:
        return "session" if self.session else "agent" if self.agent else "user"

    def covers(self, tenant: str | None, agent: str, ov_session_id: str) -> bool:
        """Whether a session of ``tenant``'s ``agent`` is in the scope."""
        if tenant != self.tenant:
            return False
        if self.session is not None:
            return ov_session_id == self.session
        return self.agent is None or agent == self.agent

    def covers_scope(self, scope: str, ov_session_id: str) -> bool:
        """``covers`` for a session key's scope (``core.session.scope_of``)."""
        tenant, agent = tenant_and_agent(scope)
        return self.covers(tenant, agent, ov_session_id)

    def describe(self) -> str:
        who = f"user {self.tenant}" if self.tenant else "the deployment's own user"
        if self.session:
            return f"session {self.session} of {who}"
        return f"agent {self.agent} of {who}" if self.agent else who


def scope_digest(prefix: str, scope: ErasureScope) -> str:
    """The tombstone's name for ``scope``: a digest, so a tombstone holds no user id."""
    named = "\x1f".join((prefix, scope.tenant or "-", scope.agent or "", scope.session or ""))
    return hashlib.sha256(named.encode("utf-8")).hexdigest()[:32]


def digests_of_session(prefix: str, tenant: str | None, agent: str, ov_session_id: str) -> tuple[str, ...]:
    """The tombstones that would cover a session: its tenant's, its agent's, its own."""
    return (
        scope_digest(prefix, ErasureScope(tenant)),
        scope_digest(prefix, ErasureScope(tenant, agent=agent)),
        scope_digest(prefix, ErasureScope(tenant, session=ov_session_id)),
    )
