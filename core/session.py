"""Where a conversation lives: ``SessionAddress`` and the shard it maps to.

One address travels wherever the code used to pass ``(ov_session_id, agent_id,
user)`` by keyword: capture, snapshots, commits and the RPC all derive their
Redis keys from it (``workers.store.keys.Keys.session``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.config import Settings

TENANT_KEY_PREFIX = "k"
"""Tenant labels derived from an unknown API key look like ``k<16 hex>``."""


def shard_of(ov_session_id: str, shards: int) -> int:
    """Stable shard for an OV session id: first 4 bytes of sha256, big-endian, mod N.

    The TypeScript plugin computes the same, so both sides agree.
    """
    digest = hashlib.sha256(ov_session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % shards


def tenant_for_api_key(settings: Settings, api_key: str | None) -> str | None:
    """The tenant label scoping Redis keys for a caller's key.

    No key, or the service's own key: the default tenant (None), as capture
    uses for events without a user. A key configured in ``user_api_keys``:
    its label, so capture workers (which act with those keys) and the RPC
    agree on the scope. Any other key: ``k`` + the first 16 hex digits of its
    sha256, stable per key and never revealing it.
    """
    if not api_key or api_key == settings.api_key:
        return None
    for label, key in settings.user_api_keys.items():
        if key == api_key:
            return str(label)
    return TENANT_KEY_PREFIX + hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:16]


def scope_of(tenant: str | None, agent_id: str) -> str:
    """Per-tenant, per-agent scope so two agents (or tenants) never share a snapshot."""
    return f"{tenant or '-'}.{agent_id}"


def tenant_and_agent(scope: str) -> tuple[str | None, str]:
    """``scope_of`` read back: (tenant, agent id). A tenant label holds no dot; an agent id may."""
    tenant, _, agent_id = scope.partition(".")
    return (None if tenant == "-" else tenant), agent_id


@dataclass(frozen=True, slots=True)
class SessionAddress:
    """An OV session as one agent of one tenant sees it.

    ``tenant`` is the tenant label: the key of ``Settings.user_api_keys`` whose OV
    API key the session's calls use; None is the default identity (``api_key``,
    or the dev-mode account/user). Wire formats still call it ``user``.
    """

    ov_session_id: str
    agent_id: str
    tenant: str | None = None

    @property
    def scope(self) -> str:
        return scope_of(self.tenant, self.agent_id)

    def shard(self, shards: int) -> int:
        return shard_of(self.ov_session_id, shards)
