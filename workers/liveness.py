"""Liveness, apart from readiness: whether a process of this host still runs its loop,
known without Redis or OV (``ovstream health --probe live``).

``ovstream health`` (readiness) asks Redis whether the process was heard of lately: with
Redis away it cannot say, and a liveness probe built on it restarted every capture and worker
pod after a minute of a Redis outage (a restart never brings a dependency back). So each
capture and worker process also touches a file of its own in ``livenessDir`` every
``LIVENESS_BEAT_S``, from the loop that does its work (capture's event loop, the worker's
due-job thread), Redis or no Redis; the live probe reads the files' ages. A process whose
loop is stuck stops touching its file and is restarted; one waiting for Redis or OV is not.

A file names its deployment (``deployment_tag``: the key prefix and the Redis it runs on), so
that with two deployments on one host each probe speaks only of its own processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings

log = logging.getLogger(__name__)

LIVENESS_BEAT_S = 1.0
"""How often a process touches its file."""
LIVENESS_STALE_S = 60.0
"""A file untouched this long: the process's loop is stuck (the live probe fails)."""


def deployment_tag(settings: Settings) -> str:
    """A short name of the deployment a process belongs to: its key prefix and its Redis
    (without credentials), the two things that make two deployments two."""
    where = f"{settings.key_prefix}\x00{settings.redacted_redis_url()}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def beat_path(settings: Settings, role: str, pid: int | None = None) -> Path:
    name = f"ovstream-{deployment_tag(settings)}-{role}-{pid if pid is not None else os.getpid()}.alive"
    return Path(settings.liveness_dir) / name


class LivenessBeat:
    """This process's file: ``beat`` touches it (a failure said once), ``close`` removes it."""

    def __init__(self, settings: Settings, role: str) -> None:
        self.path = beat_path(settings, role)
        self._failing = False

    def beat(self) -> None:
        try:
            self.path.touch()
        except OSError as exc:
            if not self._failing:
                log.warning(
                    "cannot touch %s (%s): `ovstream health --probe live` will not see this process", self.path, exc
                )
            self._failing = True
        else:
            self._failing = False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


class BeatingThread(threading.Thread):
    """Beats for a process whose work loop is not ours to beat from (RQ's): from the start,
    while the Redis wait and RQ's blocking dequeue last, until ``stop``."""

    def __init__(self, beat: LivenessBeat) -> None:
        super().__init__(name="ovstream-liveness", daemon=True)
        self._beat = beat
        self._stop_event = threading.Event()

    def beat_now(self) -> None:
        self._beat.beat()

    def run(self) -> None:
        while not self._stop_event.wait(LIVENESS_BEAT_S):
            self._beat.beat()

    def stop(self) -> None:
        self._stop_event.set()
        self._beat.close()


@dataclass(frozen=True, slots=True)
class LiveProcess:
    pid: int
    age_s: float
    """Seconds since it last touched its file."""


def live_processes(settings: Settings, role: str, *, now: float | None = None) -> list[LiveProcess]:
    """The processes of ``role`` of this deployment on this host that left a file, still
    running (their pid exists), with the age of their last beat; a file left by a dead
    process, or by another deployment's, is ignored."""
    now = time.time() if now is None else now
    found = []
    prefix = f"ovstream-{deployment_tag(settings)}-{role}-"
    for path in sorted(Path(settings.liveness_dir).glob(f"{prefix}*.alive")):
        pid_text = path.name.removeprefix(prefix).removesuffix(".alive")
        if not pid_text.isdigit() or not _running(int(pid_text)):
            continue
        try:
            found.append(LiveProcess(int(pid_text), max(0.0, now - path.stat().st_mtime)))
        except OSError:  # it ended between the glob and the stat
            continue
    return found


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True
