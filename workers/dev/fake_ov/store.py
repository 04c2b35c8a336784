"""The fake's data, shared by its route mixins (sessions, content) and FakeOV itself."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from workers.dev.fake_ov.state import Tenant


class FakeStore:
    """Tenants, content entries, accounts, keys and knobs of one fake server."""

    def __init__(
        self,
        *,
        api_keys: dict[str, tuple[str, str]] | None = None,
        root_key: str | None = None,
        phase2: str = "complete",
        phase2_reads_until_done: int = 0,
    ) -> None:
        self.auth_enabled = bool(api_keys or root_key)
        """API-key mode; fixed at start (admin-made keys do not switch dev mode to it)."""
        self.api_keys: dict[str, tuple[str, str]] = dict(api_keys or {})
        self.admin_keys: set[str] = set()
        self.root_key = root_key
        self.phase2 = phase2
        self.phase2_reads_until_done = phase2_reads_until_done
        self.down = False
        self.latency_s: float | dict[str, float | tuple[float, float]] = {}
        self.calls: list[tuple[str, str]] = []
        self.requests: list[httpx.Request] = []
        self.tenants: dict[tuple[str, str], Tenant] = {}
        self.entries: dict[str, dict[str, Any]] = {}
        self.accounts: dict[str, dict[str, str]] = {}
        """account -> {user_id: role}, for accounts made through the admin API."""
        self.uploads: dict[str, tuple[str, bytes]] = {}
        self._failures: list[tuple[int, str, str | None, bool, str]] = []
        self._seq = 0
        self._answering = threading.RLock()
        """Held while a request is answered (the sync OV client asks from threads of its own)."""

    def tenant(self, account: str = "default", user: str = "default") -> Tenant:
        return self.tenants.setdefault((account, user), Tenant(account, user))

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq
