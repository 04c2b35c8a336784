"""The fake OV as a process (``ovstream fake-ov``) for the tiers that run real processes, and
the probes that say a server answers."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers.e2e import ovstream_command, settings_env
from tests.helpers.waiting import wait_until
from workers.dev.local_redis import free_port


def spawn_fake_ov(port: int, workdir: Path, *options: str) -> subprocess.Popen[bytes]:
    """``ovstream fake-ov`` on ``port`` (the FakeOV over HTTP, as a process; ``options`` of the
    command, e.g. ``--route-latency-ms``); wait with ``ov_answers``."""
    log = open(workdir / "fake-ov.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(
        [*ovstream_command(), "fake-ov", "--port", str(port), *options],
        env=settings_env({}),
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return proc


@contextmanager
def fake_ov_process(workdir: Path, *options: str, port: int | None = None) -> Iterator[str]:
    """``ovstream fake-ov`` (``options`` of the command) answering, until the block ends: its URL."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn_fake_ov(port, workdir, *options)
    try:
        wait_until(lambda: ov_answers(url), "the fake OV answering")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def answers(url: str) -> bool:
    """Whether a GET of ``url`` answers 200 (a server that is up)."""
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def ov_answers(url: str) -> bool:
    return answers(f"{url}/health")
