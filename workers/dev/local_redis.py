"""A ``redis-server`` of our own on a free loopback port: for the tests, the demo and bench/.

One implementation so that every place that needs a throw-away Redis starts it the same way
(no persistence, own process group, temp dir removed on stop, never left running on Ctrl-C).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

import redis

START_TIMEOUT_S = 10.0
"""How long a started redis-server may take to answer PING."""


class LocalRedisError(RuntimeError):
    """redis-server is missing or did not come up; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def redis_answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether a real Redis at ``url`` answers PING (``fakeredis://`` is not asked)."""
    if url.startswith("fakeredis://"):
        return False
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


@dataclass
class RedisServer:
    """A ``redis-server`` this process started (own process group, temp dir)."""

    proc: subprocess.Popen[bytes]
    url: str
    workdir: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_redis_server(exe: str | None = None) -> RedisServer:
    """``redis-server`` on a free loopback port, no persistence; waits for PING."""
    exe = exe or shutil.which("redis-server")
    if exe is None:
        raise LocalRedisError("redis-server is not on PATH")
    port, workdir = free_port(), tempfile.mkdtemp(prefix="ovstream-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = RedisServer(proc, f"redis://127.0.0.1:{port}/0", workdir)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not redis_answers(server.url, 0.5):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise LocalRedisError(f"redis-server on port {port} did not answer PING (exit code {proc.poll()})")
            time.sleep(0.05)
    except BaseException:  # Ctrl-C included: never leave it running
        server.stop()
        raise
    return server
