"""Fixtures of the ``ov`` tier: a real openviking-server 0.5.2, offline.

Session fixtures start, on free loopback ports, the deterministic model server
(``workers.dev.model_server``) and ``openviking-server`` in dev mode pointing at it
(``ov_server``). ``ov_keyed_server`` is a second server with a root API key,
started the first time a test asks for it. Nothing is installed here: when
``find_openviking_server()`` finds no binary the tier is skipped, or fails when
``$CI`` is set. Teardown kills each server's process group and checks that
nothing of it is left.

Every test under tests/integration is marked ``ov``. ``OVSTREAM_MODEL_LOG_DIR``
makes the model server write each chat request and answer there (debugging).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.waiting import wait_until
from workers.dev.local_ov import INSTALL_HINT, LocalOV, find_openviking_server, start_local_ov
from workers.dev.local_redis import free_port
from workers.dev.model_server import ModelServerHandle, start_model_server

HERE = Path(__file__).resolve().parent
ROOT_API_KEY = "ovstream-test-root-key"
TERMINAL_TASK_STATES = ("completed", "failed", "cancelled")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.ov)


@pytest.fixture(scope="session")
def ov_binary() -> str:
    exe = find_openviking_server()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(INSTALL_HINT, pytrace=False)
        pytest.skip("openviking-server not installed (set CI=1 to make this a failure). " + INSTALL_HINT)
    return exe


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServerHandle]:
    handle = start_model_server("127.0.0.1", 0, log_dir=os.environ.get("OVSTREAM_MODEL_LOG_DIR"))
    try:
        yield handle
    finally:
        handle.stop()


def _assert_group_gone(server: LocalOV) -> None:
    try:
        os.killpg(server.pid, 0)
    except ProcessLookupError:
        return
    pytest.fail(f"openviking-server process group {server.pid} still alive after stop()")


class _LazyServer:
    def __init__(self, start: Callable[[], LocalOV]) -> None:
        self._start = start
        self.server: LocalOV | None = None

    def get(self) -> LocalOV:
        if self.server is None:
            self.server = self._start()
        return self.server


def _launcher(
    binary: str, model: ModelServerHandle, root_api_key: str | None, tmp_dirs: list[str]
) -> Callable[[], LocalOV]:
    def start() -> LocalOV:
        workdir = tempfile.mkdtemp(prefix="ovstream-ov-")
        tmp_dirs.append(workdir)
        return start_local_ov(workdir, port=free_port(), model_url=model.url, root_api_key=root_api_key, binary=binary)

    return start


@pytest.fixture(scope="session")
def _ov_servers(ov_binary: str, model_server: ModelServerHandle) -> Iterator[dict[str, _LazyServer]]:
    tmp_dirs: list[str] = []
    servers = {
        "dev": _LazyServer(_launcher(ov_binary, model_server, None, tmp_dirs)),
        "keyed": _LazyServer(_launcher(ov_binary, model_server, ROOT_API_KEY, tmp_dirs)),
    }
    try:
        yield servers
    finally:
        running = [s.server for s in servers.values() if s.server is not None]
        for server in running:
            server.stop()
        for server in running:
            _assert_group_gone(server)
        keep = os.environ.get("OVSTREAM_KEEP_OV_WORKDIR")
        for d in tmp_dirs:
            if not keep:
                shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def ov_server(_ov_servers: dict[str, _LazyServer]) -> LocalOV:
    """openviking-server in dev mode (no root key), shared by the whole session."""
    return _ov_servers["dev"].get()


@pytest.fixture(scope="session")
def ov_keyed_server(_ov_servers: dict[str, _LazyServer]) -> LocalOV:
    """openviking-server with ``server.root_api_key = ROOT_API_KEY``, started on first use."""
    return _ov_servers["keyed"].get()


@pytest.fixture
def ov_http(ov_server: LocalOV) -> Iterator[httpx.Client]:
    """A plain httpx client on the dev-mode server (default account and user)."""
    with httpx.Client(base_url=ov_server.url, timeout=60.0, trust_env=False) as client:
        yield client


@pytest.fixture
def model_mode(model_server: ModelServerHandle) -> Iterator[Callable[[str], None]]:
    """Switch the model server's chat mode; always back to ``normal`` afterwards."""
    try:
        yield model_server.set_mode
    finally:
        model_server.set_mode("normal")


def poll_task(client: httpx.Client, task_id: str, *, timeout_s: float = 120.0, interval_s: float = 0.25) -> dict:
    """Poll ``/api/v1/tasks/{id}`` until it is terminal; returns the task result dict.

    The timeout only bounds a hang (a broken server); no test asserts on timing.
    """

    def terminal() -> dict | None:
        r = client.get(f"/api/v1/tasks/{task_id}")
        r.raise_for_status()
        task = r.json()["result"]
        return task if task["status"] in TERMINAL_TASK_STATES else None

    return wait_until(terminal, f"task {task_id} finished", timeout_s=timeout_s, interval_s=interval_s)


@pytest.fixture
def wait_task() -> Callable[..., dict]:
    """``wait_task(client, task_id)`` -> the terminal task result (see ``poll_task``)."""
    return poll_task
