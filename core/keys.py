"""Redis key names, defined once.

Every key a session touches carries the session's shard as a Redis Cluster
hash tag (``{s3}``), so one session's stream entry, applied offset, snapshot
and commit records live in one slot and can be changed in one MULTI or script.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def shard_of(ov_session_id: str, shards: int) -> int:
    """Stable shard for an OV session id: first 4 bytes of sha256, big-endian, mod N.

    The TypeScript plugin computes the same, so both sides agree.
    """
    digest = hashlib.sha256(ov_session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % shards


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder bound to one prefix (``Settings.key_prefix``)."""

    prefix: str = "ovstream"

    def stream(self, shard: int) -> str:
        """Turn events of one shard (a Redis stream)."""
        return f"{self.prefix}:{{s{shard}}}:turns"

    def last_turn(self, shard: int, ov_session_id: str) -> str:
        """String: the event_id of the newest turn published for the session, by any
        process (the publisher sets it with the XADD), so assemble reads the stream
        only when the session has a turn it does not know of."""
        return f"{self.prefix}:{{s{shard}}}:last-turn:{ov_session_id}"

    def dead_letters(self) -> str:
        """Dead-letter stream: entries that could not be handled, with the reason."""
        return f"{self.prefix}:dlq"

    def commit_outcomes(self) -> str:
        """Stream of every commit outcome (completed / failed / timeout / skipped)."""
        return f"{self.prefix}:commit-outcomes"

    def _session(self, kind: str, shard: int, scope: str, ov_session_id: str) -> str:
        return f"{self.prefix}:{{s{shard}}}:{kind}:{scope}:{ov_session_id}"

    def applied(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: the last stream id applied to OV for this session, and bookkeeping."""
        return self._session("applied", shard, scope, ov_session_id)

    def snapshot(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: ``data`` = the session's ContextSnapshot (msgspec JSON), ``id`` = its
        applied stream id and ``fetched_ms`` = when its OV read began (for the no-regress check)."""
        return self._session("snapshot", shard, scope, ov_session_id)

    def recall_turn(self, shard: int, scope: str, ov_session_id: str, turn: str) -> str:
        """String: the recall block of one user turn (core.turns.recall_turn_key); "" for none."""
        return f"{self._session('recall', shard, scope, ov_session_id)}:{turn}"

    def commits(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: commit_id -> CommitOutcome JSON, the record of truth for that session."""
        return self._session("commits", shard, scope, ov_session_id)

    def commit_generation(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Counter naming the session's current commit generation."""
        return self._session("commit-gen", shard, scope, ov_session_id)

    def commit_inflight(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: ``req`` = the session's in-flight CommitRequest, ``job`` = the RQ job carrying it."""
        return self._session("commit-inflight", shard, scope, ov_session_id)

    def commit_tenant_lock(self, tenant: str) -> str:
        """The commit id whose phase 2 runs for an OV tenant now (one at a time; workers.jobs_tenant)."""
        return f"{self.prefix}:commit-tenant:{tenant}"

    def capture_lease(self, shard: int) -> str:
        """Which capture consumer owns a shard right now (SET NX PX, renewed while alive)."""
        return f"{self.prefix}:{{s{shard}}}:capture-lease"

    def capture_workers(self) -> str:
        """Sorted set: live capture consumer -> lease expiry (ms), to split shards fairly."""
        return f"{self.prefix}:capture-workers"


def scope_of(user: str | None, agent_id: str) -> str:
    """Per-tenant, per-agent scope so two agents (or users) never share a snapshot."""
    return f"{user or '-'}.{agent_id}"
