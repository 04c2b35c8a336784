"""The chaos tier: ovstream as separate OS processes, faults injected under load.

Everything real and owned by this module: a durable redis-server (append-only file,
fsync'd on every write, so it can be SIGKILLed and started again), the deterministic
model server, an openviking-server 0.5.2 of its own (it gets frozen, and a proxy in front of
it answers 500 to session writes on demand), and ovstream's
``capture`` (two) and ``worker`` processes. Every test here is marked ``chaos``; without
an openviking-server the tier is skipped, or fails when ``$CI`` is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.chaos import Deployment
from tests.helpers.ov_fault_proxy import OVFaultProxy, ov_fault_proxy
from workers.dev.local_ov import INSTALL_HINT, LocalOV, find_openviking_server, start_local_ov
from workers.dev.local_redis import RedisServer, free_port, start_redis_server
from workers.dev.model_server import start_model_server

HERE = Path(__file__).resolve().parent
PROCESSES = ("capture-a", "capture-b", "worker")

CHAOS_SETTINGS = {
    "key_prefix": "chaos",
    "consumer_group": "capture",
    "shards": 4,
    "capture_lease_ms": 3000,
    "capture_block_ms": 200,
    "commit_token_threshold": 1200,
    "commit_keep_recent_count": 4,
    "phase2_poll_interval_s": 0.3,
    "phase2_deadline_s": 120.0,
    "ov_timeout_s": 5.0,
}
"""A deployment tuned to fail over within the test: 3 s shard leases, a low commit
threshold (a commit every ~10 turns of a session), OV calls given up after 5 s."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.chaos)


@dataclass
class ChaosWorld:
    redis: RedisServer
    ov: LocalOV
    ov_proxy: OVFaultProxy
    """What ovstream's processes reach OV through: it can make OV answer 500 to writes."""
    deployment: Deployment


@contextmanager
def chaos_world() -> Iterator[ChaosWorld]:
    """Redis, the model server, a real OV behind its fault proxy, and a ``Deployment`` with no
    process started yet (each test starts its own); all stopped at the end."""
    binary = find_openviking_server()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail(INSTALL_HINT, pytrace=False)
        pytest.skip("openviking-server not installed (set CI=1 to make this a failure). " + INSTALL_HINT)
    workdir = Path(tempfile.mkdtemp(prefix="ovstream-chaos-"))
    model = start_model_server("127.0.0.1", 0)
    server = start_redis_server(durable=True)
    ov: LocalOV | None = None
    try:
        (workdir / "ov").mkdir()
        ov = start_local_ov(workdir / "ov", port=free_port(), model_url=model.url, binary=binary)
        with ov_fault_proxy(ov.url) as (proxy, proxy_url):
            values = {**CHAOS_SETTINGS, "base_url": proxy_url, "redis_url": server.url}
            deployment = Deployment(values, workdir)
            try:
                yield ChaosWorld(server, ov, proxy, deployment)
            finally:
                deployment.stop()
    finally:
        if ov is not None:
            ov.stop()
        server.stop()
        model.stop()
        if not os.environ.get("OVSTREAM_KEEP_CHAOS_WORKDIR"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def world() -> Iterator[ChaosWorld]:
    with chaos_world() as started:
        for name in PROCESSES:
            started.deployment.start(name)
        yield started
