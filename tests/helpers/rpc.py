"""Helpers of the RPC tests: the ``Rpc`` bundle and an embedded RQ worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import redis

from core.config import Settings
from workers.commits import context as jobs
from workers.commits.worker import run_embedded_worker
from workers.dev.fake_ov.app import FakeOV
from workers.store.applied import CAPTURED_THROUGH, LAST_ID
from workers.store.keys import Keys, scope_of, shard_of

# Small waits and no retry back-off, so failure paths answer at once.
TEST_SETTINGS: dict[str, Any] = {
    "ov_backoff_s": 0.0,
    "ov_retries": 0,
    "phase2_poll_interval_s": 0.05,
    "compact_wait_s": 20.0,
    # Bounds a test of the bounds sets itself (tests/rpc/test_assemble_bounds.py); elsewhere a
    # loaded machine must not turn an answer into the pass-through (an assemble over the default
    # 4 s, its recall over 2 s: seen on a busy CI machine) and fail a test of what it answers.
    "recall_timeout_s": 20.0,
    "assemble_timeout_s": 60.0,
}


@dataclass
class Rpc:
    client: httpx.AsyncClient
    fake: FakeOV
    redis: redis.Redis
    settings: Settings
    app: Any

    async def assemble(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.client.post("/v1/assemble", json=body, headers=headers)

    async def compact(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.client.post("/v1/compact", json=body, headers=headers)

    async def tool(self, name: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.client.post(f"/v1/tools/{name}", json=body, headers=headers)

    @property
    def ov(self) -> Any:
        """The app's own OV client (seeding sessions the way capture would)."""
        return self.app.state.services.ov

    def mark_captured(
        self,
        ov_session_id: str,
        captured_through: int,
        *,
        agent_id: str = "main",
        user: str | None = None,
        stream_id: str = "1700000000000-0",
    ) -> None:
        """Record what capture records after applying a turn: the applied offset."""
        key = Keys(self.settings.key_prefix).applied(
            shard_of(ov_session_id, self.settings.shards), scope_of(user, agent_id), ov_session_id
        )
        self.redis.hset(key, mapping={LAST_ID: stream_id, CAPTURED_THROUGH: captured_through})

    def metric(self, text: str, line_start: str) -> float | None:
        for line in text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None


@contextmanager
def running_worker(rpc: Rpc) -> Iterator[None]:
    """An embedded RQ worker (scheduler included) running commit jobs against the FakeOV."""
    jobs.set_ov_transport_factory(lambda _settings: rpc.fake.transport())
    stop = threading.Event()
    thread = threading.Thread(
        target=run_embedded_worker, args=(rpc.redis, rpc.settings, stop), kwargs={"pause_s": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        jobs.set_ov_transport_factory(None)
