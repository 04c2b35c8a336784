"""Fixtures of the capture tests: real redis-server (tests/conftest.py), in-memory FakeOV.

Every test here is marked ``redis``. ``settings`` has short timings so
takeovers and retries happen within a test; ``fake_ov`` is also what RQ jobs
reach (workers.commits.context.set_ov_transport_factory). tests/helpers/capture.py builds turns
whose messages say which session and turn they came from, so the order in OV
can be checked message by message.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from tests.helpers.fake_ov_process import ov_answers, spawn_fake_ov
from tests.helpers.waiting import wait_until
from tests.rpc.conftest import make_rpc  # noqa: F401 (a fixture: assemble over what capture stored)
from workers.commits import context as jobs
from workers.commits import queue as commit_queue
from workers.dev.fake_ov.app import FakeOV
from workers.dev.local_redis import free_port

_HERE = Path(__file__).parent
_prefixes = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(_HERE):
            item.add_marker(pytest.mark.redis)


@pytest.fixture
def settings(redis_settings: dict[str, Any]) -> Settings:
    return Settings(
        **redis_settings,
        key_prefix=f"t{next(_prefixes)}",
        shards=4,
        capture_block_ms=50,
        capture_settle_recheck_s=0.05,
        max_deliveries=2,
        ov_backoff_s=0.01,
        commit_token_threshold=100_000,
        phase2_poll_interval_s=0.01,
        phase2_deadline_s=30,
        phase2_read_retries=2,
    )


@pytest.fixture
def fake_ov() -> Iterator[FakeOV]:
    fake = FakeOV()
    transport = fake.transport()
    jobs.set_ov_transport_factory(lambda _s: transport)
    try:
        yield fake
    finally:
        jobs.set_ov_transport_factory(None)
        commit_queue.set_clock(None)


@pytest.fixture
def fake_ov_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = spawn_fake_ov(port, tmp_path, "--log-writes")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: ov_answers(url), "the fake OV answering", timeout_s=30)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
