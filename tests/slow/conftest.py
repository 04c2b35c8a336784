"""The slow tier: capture recovering a large backlog on a busy, slow machine.

What the tier owns: a fake OV process (``ovstream fake-ov``) whose message writes answer after
1-2 s (``--route-latency-ms``), and one ``ovstream capture`` process configured only by
``OVSTREAM_*``, which a starver thread freezes (SIGSTOP) for 3-8 s at a time. The store is the
session's redis-server or its 3-master cluster. Every test here is marked ``slow``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cluster_store
from workers.dev.local_redis import RedisClusterServers

_HERE = Path(__file__).parent

WRITE_LATENCY_MS = "add_messages=1000-2000"
"""Every message write answers 1-2 s after it arrives (then takes effect)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(_HERE):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=["redis", "cluster"])
def store(request: pytest.FixtureRequest, redis_url: str) -> dict[str, Any]:
    """The store's settings: the plain redis-server, or the cluster (flushed) with the RQ queue
    on the plain one."""
    if request.param == "redis":
        return {"redis_url": redis_url}
    cluster: RedisClusterServers = request.getfixturevalue("redis_cluster")
    return cluster_store(cluster, redis_url)


class Starver:
    """Freezes a process (SIGSTOP) for ``stop_s`` seconds at a time, with ``run_s`` of running
    between, until ``stop()``: a capture process starved of CPU on a busy machine."""

    def __init__(self, proc: subprocess.Popen[bytes], stop_s: tuple[float, float], run_s: tuple[float, float]):
        self.proc, self.stop_s, self.run_s = proc, stop_s, run_s
        self.frozen_s = 0.0
        self.freezes = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="starver", daemon=True)
        self._rng = random.Random(25)

    def start(self) -> Starver:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.wait(self._rng.uniform(*self.run_s)):
            if self.proc.poll() is not None:
                return
            pause = self._rng.uniform(*self.stop_s)
            os.kill(self.proc.pid, signal.SIGSTOP)
            try:
                self._done.wait(pause)
            finally:
                os.kill(self.proc.pid, signal.SIGCONT)
            self.frozen_s += pause
            self.freezes += 1

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=20)
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
