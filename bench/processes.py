"""What the process-level benches share: ``ovstream`` subcommands as processes of their own
(each in its own process group, stopped with SIGTERM, SIGKILL if it hangs)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
OVSTREAM = [sys.executable, "-m", "workers.cli"]


def ovstream_env(settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without the caller's own ``OVSTREAM_*`` settings, with ``settings``
    (``{"OVSTREAM_REDIS_URL": ...}``): a bench's processes configured by it alone."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}, **(settings or {})}


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


class CpuSplit:
    """The bench's own load (its publisher, its polls) on one CPU, what it measures on the others.

    On a small machine the load generator competes with the system it loads: a publisher
    starved by busier workers publishes slower, and the bench reads that as the workers being
    slower. A gateway publishes from its own machine; this gives the publisher its own CPU.
    Children inherit the CPUs they are started on, so start them inside ``system_side()``.
    With ``load_cpu`` None everything shares every CPU.
    """

    def __init__(self, load_cpu: int | None) -> None:
        every = os.sched_getaffinity(0)
        if load_cpu is not None and (load_cpu not in every or len(every) < 2):
            raise SystemExit(f"--load-cpu {load_cpu}: needs another CPU besides it (this process has {sorted(every)})")
        self.load = every if load_cpu is None else {load_cpu}
        self.system = every if load_cpu is None else every - self.load
        os.sched_setaffinity(0, self.load)

    @contextlib.contextmanager
    def system_side(self) -> Iterator[None]:
        os.sched_setaffinity(0, self.system)
        try:
            yield
        finally:
            os.sched_setaffinity(0, self.load)


def work_dir(name: str) -> Path:
    """This run's directory for its processes' logs and data, ``$TMPDIR/ovstream-<name>-<pid>``
    (made; kept after the run, to read the logs)."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"ovstream-{name}-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    return work


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


def redis_cpu_seconds(client: redis.Redis) -> float:
    """CPU seconds the Redis server has used so far (``INFO cpu``: its main thread's user + sys)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def redis_calls(client: redis.Redis) -> int:
    """Commands Redis has run so far (every command's calls, ``INFO commandstats``)."""
    return sum(redis_calls_by_command(client).values())


def redis_calls_by_command(client: redis.Redis) -> dict[str, int]:
    """Calls so far of each command Redis has run (``INFO commandstats``; a script's own calls
    counted under theirs as well as the EVALSHA)."""
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in client.info("commandstats").items()}


def redis_reads(client: redis.Redis) -> int:
    """Requests Redis has read so far (``INFO stats`` ``total_reads_processed``): one per round
    trip a client makes (a pipeline's commands arrive in one), this call's own included."""
    return int(client.info("stats")["total_reads_processed"])


def redis_usec_by_command(client: redis.Redis) -> dict[str, int]:
    """Microseconds of Redis CPU so far in each command (``INFO commandstats``; a script's own
    calls counted under theirs as well as in the EVALSHA's)."""
    return {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in client.info("commandstats").items()}


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


CGROUP_CPU_V1 = Path("/sys/fs/cgroup/cpu")
"""cgroup v1's cpu controller (v2 keeps ``cpu.max`` in each group under /sys/fs/cgroup)."""


def cap_cpu(pid: int, percent: float, name: str) -> Path | None:
    """Put process ``pid`` (and what it forks later) in a cgroup of its own allowed ``percent``
    of one CPU; None where this machine lets us make none (not root, no cpu controller)."""
    period_us = 100_000
    quota_us = max(1_000, int(period_us * percent / 100))
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    try:
        if v2.exists() and "cpu" in v2.read_text().split():
            group = Path("/sys/fs/cgroup") / name
            group.mkdir(exist_ok=True)
            (group / "cpu.max").write_text(f"{quota_us} {period_us}")
        elif (CGROUP_CPU_V1 / "cpu.cfs_quota_us").exists():
            group = CGROUP_CPU_V1 / name
            group.mkdir(exist_ok=True)
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        else:
            return None
        (group / "cgroup.procs").write_text(str(pid))
    except OSError:
        return None
    return group


def must_cap(pid: int, percent: float, name: str) -> Path:
    """``cap_cpu``, or the bench stops saying why (``--cpu-cap`` asked for it)."""
    group = cap_cpu(pid, percent, name)
    if group is None:
        raise SystemExit("--cpu-cap: this machine lets us make no cgroup (root and a cpu controller)")
    return group


CGROUP_EMPTY_WAIT_S = 10.0
"""How long ``uncap`` waits for a group's last processes to exit (a server's forked workers
leave a little after their parent)."""


def uncap(group: Path | None) -> None:
    """Remove a group ``cap_cpu`` made, once its processes are gone (a group with members
    cannot be removed); one still not empty after ``CGROUP_EMPTY_WAIT_S`` is said, not left
    behind in silence."""
    if group is None:
        return
    deadline = time.monotonic() + CGROUP_EMPTY_WAIT_S
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                print(f"cgroup {group} still has processes; remove it with rmdir once they exit", file=sys.stderr)
                return
            time.sleep(0.1)


def append_rows(path: Path, rows: list[Any]) -> None:
    """Rows (dataclasses) appended to ``path`` as JSON lines (what bench/scaleout_chart.py draws)."""
    with path.open("a") as out:
        out.writelines(json.dumps(asdict(row)) + "\n" for row in rows)


POOL_ERRORS = ("Too many connections", "No connection available", "MaxConnectionsError")
"""What redis-py says when a process's connection pool is exhausted."""


def pool_errors(logs: list[Path]) -> int:
    return sum(log.read_text(errors="replace").count(e) for log in logs for e in POOL_ERRORS)


def acquisitions(logs: list[Path], offsets: list[int]) -> int:
    """Shards acquired (a lease taken) in each log since its byte ``offsets``."""
    return sum(log.read_bytes()[at:].count(b" acquired by ") for log, at in zip(logs, offsets, strict=True))


class RedisMonitor:
    """Every command Redis runs while it is open, by the family of the key it names (``MONITOR``
    on a connection of its own; it slows Redis, so a row measured with it says so). A family
    is the key with its ids left out: ``rq:job``, ``rq:wip``, ``{prefix}:commit_inflight``."""

    def __init__(self, url: str, prefix: str, trace: Path | None = None) -> None:
        self._client = redis.Redis.from_url(url)
        self._prefix = prefix
        self._trace = trace.open("w") if trace is not None else None
        """Every command as Redis ran it, one a line (``--trace``)."""
        self.families: dict[str, int] = {}
        self._monitor = self._client.monitor().__enter__()
        self._thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the connection closed: done
            while True:
                said = self._monitor.next_command()
                command = str(said.get("command", ""))
                if self._trace is not None:
                    self._trace.write(f"{said.get('client_address', '')}:{said.get('client_port', '')} {command}\n")
                family = key_family(command, self._prefix)
                self.families[family] = self.families.get(family, 0) + 1

    def close(self) -> dict[str, int]:
        """Stop; the counts by family."""
        with contextlib.suppress(Exception):
            self._monitor.connection.disconnect()
        self._thread.join(timeout=5)
        self._client.close()
        if self._trace is not None:
            self._trace.close()
        return dict(self.families)


def _an_id(segment: str) -> bool:
    """A key segment that names one thing (a hash, a number, ``u3``), not a kind of key
    (``phase2-due`` is a kind: a word with a digit inside)."""
    return bool(re.search(r"\d", segment)) and not re.fullmatch(r"[a-z]+\d-[a-z-]+", segment)


def key_family(command: str, prefix: str) -> str:
    """``COMMAND family`` of a MONITOR line's command: its key's segments that are no id."""
    parts = command.split(" ", 2)
    name = parts[0].lower()
    if len(parts) < 2 or name in ("evalsha", "eval", "multi", "exec", "ping", "info", "client", "watch"):
        return name
    key = parts[1].strip('"').replace(prefix, "P")
    kept = [s for s in re.split(r"[:{}]", key) if s and not _an_id(s)][:3]
    return f"{name} {':'.join(kept)}"
