"""Fixtures of the end-to-end tests (loaded by ``pytest_plugins = ("tests.helpers.e2e_fixtures",)``
in each tests/integration/test_e2e_*.py).

``e2e_service``: one ``ovstream up`` subprocess per test module against the
session's dev-mode openviking-server and redis-server, each module on its own
Redis database so no module sees another's streams, records or RQ queue; a module
changes its service's settings by overriding the ``e2e_settings`` fixture.
``keyed_service``: the same against the API-key server, with two users (alice,
bob) created through OV's admin API; their keys are in ``user_api_keys``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.helpers.e2e import OVSession, Service, unique, workdir_for

_databases = itertools.count(1)
REDIS_DATABASES = 16


def _module_redis_url(redis_server: str) -> str:
    db = next(_databases) % REDIS_DATABASES or 1
    base = redis_server.rsplit("/", 1)[0]
    url = f"{base}/{db}"
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()
    return url


def _run(service: Service) -> Iterator[Service]:
    try:
        service.start()  # a start that fails still stops what it started
        yield service
    finally:
        service.close()


@pytest.fixture(scope="module")
def e2e_settings() -> dict[str, Any]:
    """Extra settings of the module's service (a module overrides this fixture to change them)."""
    return {}


@pytest.fixture(scope="module")
def e2e_service(
    request: pytest.FixtureRequest,
    redis_server: str,
    ov_server,
    e2e_settings: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    workdir = workdir_for(tmp_path_factory.getbasetemp(), f"e2e-{Path(str(request.path)).stem}")
    yield from _run(
        Service(ov_url=ov_server.url, redis_url=_module_redis_url(redis_server), workdir=workdir, **e2e_settings)
    )


@pytest.fixture(scope="module")
def dev_ov(ov_server) -> Iterator[OVSession]:
    ov = OVSession(ov_server.url)
    try:
        yield ov
    finally:
        ov.close()


@dataclass(frozen=True)
class Tenants:
    account: str
    keys: dict[str, str]
    """tenant label (also the OV user id) -> that user's key."""


@pytest.fixture(scope="module")
def tenants(ov_keyed_server) -> Tenants:
    """An account with two users, alice and bob, on the API-key server."""
    account = unique("e2e-acct")
    root = {"X-API-Key": ov_keyed_server.root_api_key}
    with httpx.Client(base_url=ov_keyed_server.url, headers=root, timeout=60, trust_env=False) as http:
        r = http.post("/api/v1/admin/accounts", json={"account_id": account, "admin_user_id": "e2e-admin"})
        assert r.status_code == 200, r.text
        keys = {}
        for user in ("alice", "bob"):
            r = http.post(f"/api/v1/admin/accounts/{account}/users", json={"user_id": user, "role": "user"})
            assert r.status_code == 200, r.text
            keys[user] = r.json()["result"]["user_key"]
    return Tenants(account, keys)


@pytest.fixture(scope="module")
def keyed_service(
    request: pytest.FixtureRequest,
    redis_server: str,
    ov_keyed_server,
    tenants: Tenants,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Service]:
    workdir = workdir_for(tmp_path_factory.getbasetemp(), f"e2e-{Path(str(request.path)).stem}")
    yield from _run(
        Service(
            ov_url=ov_keyed_server.url,
            redis_url=_module_redis_url(redis_server),
            workdir=workdir,
            user_api_keys=tenants.keys,
        )
    )
