"""The real host tier's own redis-server (append-only: a test stops and restarts it without
losing streams) and the stop of a process group its processes share."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import redis

from tests.helpers.e2e import wait_for
from workers.dev.local_redis import free_port


def stop_group(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
    """SIGTERM (``sig``) to the process group of ``proc``, SIGKILL after ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


class HostRedis:
    """A redis-server whose data survives a stop and start on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server") or "redis-server"
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 (the child owns it)
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url)
        try:
            wait_for(lambda: _pings(client), "host redis-server answering", timeout_s=30)
        finally:
            client.close()

    def stop(self) -> None:
        stop_group(self.proc)
        self.proc = None


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # not up yet
        return False
