"""Fixtures of the RPC tests: the app over a real redis-server and the FakeOV.

``rpc`` (a ``tests.helpers.rpc.Rpc``) bundles what a test needs: the httpx client
talking to the app in process, the FakeOV behind it, the Redis client and the
settings; ``make_rpc`` builds more with other settings. Tests that commit
(compact, memory_store) also take ``commit_worker``, an embedded RQ worker
thread running the jobs against the same FakeOV.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import redis

from core.config import Settings
from tests.helpers.rpc import TEST_SETTINGS, Rpc, running_worker
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.app import create_app
from workers.store.connection import connect, connect_async


@pytest.fixture
def fake() -> FakeOV:
    return FakeOV()


@pytest.fixture
async def make_rpc(redis_settings: dict[str, Any]) -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``await make_rpc(fake, **settings)`` -> Rpc (closed at teardown)."""
    opened: list[tuple[httpx.AsyncClient, Any, redis.Redis]] = []

    async def make(fake: FakeOV, **overrides: Any) -> Rpc:
        settings = Settings(**{**TEST_SETTINGS, **redis_settings, **overrides})
        rds = connect(settings)
        app = create_app(settings, redis=connect_async(settings), commit_redis=rds, ov_transport=fake.transport())
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://rpc")
        opened.append((client, app, rds))
        return Rpc(client, fake, rds, settings, app)

    yield make
    for client, app, rds in opened:
        await client.aclose()
        await app.state.services.ov.aclose()
        await app.state.services.redis.aclose()
        rds.close()


@pytest.fixture
async def rpc(make_rpc: Callable[..., Any], fake: FakeOV) -> Rpc:
    return await make_rpc(fake)


@pytest.fixture
def commit_worker(rpc: Rpc) -> Iterator[None]:
    with running_worker(rpc):
        yield
