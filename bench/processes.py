"""What the process-level benches share: ``ovstream`` subcommands as processes of their own
(each in its own process group, stopped with SIGTERM, SIGKILL if it hangs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
OVSTREAM = [sys.executable, "-m", "workers.cli"]


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_http(url: str, timeout_s: float = 60.0) -> None:
    """Until ``url`` answers at all (any status)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def fake_ov_requests(port: int) -> int:
    """Requests the fake OV (``ovstream fake-ov``) on ``port`` has answered so far."""
    return int(httpx.get(f"http://127.0.0.1:{port}/_stats", timeout=5).json()["requests"])


def _group(pgid: int) -> list[tuple[str, list[str]]]:
    """(pid, the fields of /proc/<pid>/stat after the name) of each live process of group ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ... utime(12) stime(13)
            found.append((stat.parent.name, fields))
    return found


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of group ``pgid``
    (a process started by ``spawn`` and every worker it forked), from /proc."""
    return sum(int(f[11]) + int(f[12]) for _, f in _group(pgid)) / os.sysconf("SC_CLK_TCK")


def group_rss_bytes(pgid: int) -> int:
    """Resident memory of the live processes of group ``pgid`` (/proc/<pid>/statm)."""
    total = 0
    for pid, _ in _group(pgid):
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE")
