"""Liveness records of the ovstream processes, in Redis, for ``ovstream status`` and
``GET /v1/status``: every capture worker (each tick) and every commit worker (its due-job
thread, every second) writes one, and removes it when it stops cleanly.

A record says who (role, name, host, pid), when it was last heard of, and what it sees:
a capture worker its shards and whether OV answers it; a commit worker its queue. A
process not heard of for ``STALE_AFTER_S`` is ``stale`` (stuck or dead): its record stays
``HEALTH_TTL_S`` so the stale state can be seen before it goes.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

from core.config import Settings
from workers.store.connection import text
from workers.store.keys import Keys
from workers.version import installed_version

HEALTH_TTL_S = 60
"""How long a process's record outlives its last beat."""
STALE_AFTER_S = 5.0
"""A process not heard of for this long is unhealthy: stuck (frozen, blocked) or dead."""

UNSAID_RELEASE = "0.2.0 or older"
"""The release of a process whose record says none (the first to say it was 0.3.0)."""

HealthState = Literal["ok", "degraded", "stale"]


def record_health(pipe: Any, settings: Settings, role: str, name: str, **facts: str | int) -> None:
    """Queue a beat of the process ``name`` on ``pipe`` (a sync or an asyncio pipeline)."""
    keys = Keys(settings.key_prefix)
    now_ms = int(time.time() * 1000)
    record = {
        "role": role,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "beat_ms": now_ms,
        "version": installed_version(),
        **facts,
    }
    pipe.hset(keys.process_health(name), mapping=record)
    pipe.pexpire(keys.process_health(name), HEALTH_TTL_S * 1000)
    pipe.zadd(keys.processes(), {name: now_ms})
    pipe.zremrangebyscore(keys.processes(), 0, now_ms - HEALTH_TTL_S * 1000)


def forget_health(pipe: Any, settings: Settings, name: str) -> None:
    """Queue the removal of a process's record (it stopped cleanly)."""
    keys = Keys(settings.key_prefix)
    pipe.delete(keys.process_health(name))
    pipe.zrem(keys.processes(), name)


@dataclass(frozen=True, slots=True)
class ProcessHealth:
    name: str
    role: str
    host: str
    pid: int
    heard_s_ago: float
    state: HealthState
    facts: dict[str, str] = field(default_factory=dict)
    """What the process reported besides who it is (shards, ov, queue)."""


def _state(heard_s_ago: float, facts: dict[str, str]) -> HealthState:
    if heard_s_ago > STALE_AFTER_S:
        return "stale"
    return "degraded" if facts.get("ov", "ok") != "ok" else "ok"


def read_health(client: redis.Redis, settings: Settings) -> list[ProcessHealth]:
    """Every process heard of within HEALTH_TTL_S, by role then name."""
    keys = Keys(settings.key_prefix)
    now_ms = int(time.time() * 1000)
    names = [text(n) for n in client.zrangebyscore(keys.processes(), now_ms - HEALTH_TTL_S * 1000, "+inf")]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.process_health(name))
    out: list[ProcessHealth] = []
    for name, raw in zip(names, pipe.execute()):
        if not raw:
            continue
        record = {text(k): text(v) for k, v in raw.items()}
        heard = max(0.0, (now_ms - int(record.pop("beat_ms", "0") or 0)) / 1000)
        role, host, pid = record.pop("role", "?"), record.pop("host", "?"), int(record.pop("pid", "0") or 0)
        out.append(ProcessHealth(name, role, host, pid, round(heard, 3), _state(heard, record), record))
    return sorted(out, key=lambda p: (p.role, p.name))
