"""Helpers of the capture tests (imported by the test modules; fixtures are in conftest.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from core.config import Settings
from core.events import ContextSnapshot, TurnEvent
from core.session import SessionAddress
from workers.capture.worker import CaptureWorker, WorkerKilled
from workers.dev.fake_ov.app import FakeOV
from workers.store.keys import Keys
from workers.store.snapshots import parse_stored, snapshot_key
from workers.store.streams import publish_turn


def turn(session: str, index: int, *, per_turn: int = 2, **fields: Any) -> TurnEvent:
    """Turn ``index`` of ``session``: the whole transcript so far; the new messages are
    ``session:q<index>`` (user) and ``session:a<index>`` (assistant) (``per_turn`` 2)."""
    messages: list[dict[str, Any]] = []
    for i in range(index + 1):
        messages.append({"role": "user", "content": f"{session}:q{i}"})
        for k in range(per_turn - 1):
            suffix = "" if k == 0 else f".{k}"
            messages.append({"role": "assistant", "content": [{"type": "text", "text": f"{session}:a{i}{suffix}"}]})
    fields.setdefault("pre_prompt_message_count", per_turn * index)
    return TurnEvent(
        event_id=uuid.uuid4().hex, session_id=session, messages=messages, published_at=time.time(), **fields
    )


def expected_texts(session: str, turns: int, *, per_turn: int = 2) -> list[str]:
    out = []
    for i in range(turns):
        out.append(f"{session}:q{i}")
        out += [f"{session}:a{i}" + ("" if k == 0 else f".{k}") for k in range(per_turn - 1)]
    return out


def ov_texts(fake: FakeOV, session: str) -> list[str]:
    """Texts of every message OV holds for ``session``, archived ones first."""
    s = fake.sessions.get(session)
    if s is None:
        return []
    stored = [m for a in s.archives for m in a.messages] + s.messages
    return [p.get("text", "") for m in stored for p in m["parts"]]


def publish(client: redis.Redis, settings: Settings, events: list[TurnEvent]) -> list[str]:
    return [publish_turn(client, settings, e) for e in events]


def kill_at(step: str, occurrence: int) -> Callable[[str], None]:
    """A fault hook that kills the worker (``WorkerKilled``) at the ``occurrence``-th ``step``."""
    seen = {"n": 0}

    def hook(current: str) -> None:
        if current == step:
            seen["n"] += 1
            if seen["n"] == occurrence:
                raise WorkerKilled(f"killed at {step} #{occurrence}")

    return hook


async def stopped(worker: CaptureWorker, task: asyncio.Task[Any], timeout_s: float = 30.0) -> None:
    """``worker.stop()``, then its ``run()`` task's end; a worker still running ``timeout_s``
    later fails the test with every task's stack (a stop that hangs, not a test that does)."""
    worker.stop()
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        stacks = []
        for other in asyncio.all_tasks():
            frames = other.get_stack(limit=12)
            stacks.append(f"{other.get_name()}: " + " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in frames))
        raise AssertionError(f"the capture worker did not stop within {timeout_s:g}s; tasks:\n" + "\n".join(stacks))
    await task


STEADY_LEASE_MS = 5_000
"""A shard lease for workers whose lease must not lapse in the test (no takeover is what it
shows): the default 600 ms makes takeovers quick, but a test process starved on a loaded
machine goes longer than that between renewals, and a lease lost mid-run is a takeover the
test did not ask for (the order test's four workers then passed shards back and forth for a
minute; a burst worker ended without writing)."""


def make_worker(settings: Settings, fake: FakeOV, **kw: Any) -> CaptureWorker:
    kw.setdefault("lease_ms", 600)
    return CaptureWorker(settings, ov_transport=fake.transport(), **kw)


async def run_until(
    workers: list[CaptureWorker], done: Callable[[], bool], *, timeout_s: float = 30.0, stop: bool = True
) -> list[BaseException | None]:
    """Run ``workers`` until ``done()``; stop them; return how each ended (None: cleanly)."""
    tasks = [asyncio.create_task(w.run()) for w in workers]
    deadline = time.monotonic() + timeout_s
    try:
        while not done():
            if all(t.done() for t in tasks):
                break
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached before the deadline")
            await asyncio.sleep(0.02)
    finally:
        if stop:
            for w in workers:
                w.stop()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for w, r in zip(workers, results):
            if isinstance(r, BaseException):  # killed: it closed nothing itself
                await w.close()
    return [r if isinstance(r, BaseException) else None for r in results]


def pending_count(client: redis.Redis, settings: Settings) -> int:
    total = 0
    for shard in range(settings.shards):
        stream = Keys(settings.key_prefix).stream(shard)
        if client.exists(stream):
            total += client.xpending(stream, settings.consumer_group)["pending"]
    return total


def stored_snapshot(client: redis.Redis, settings: Settings, address: SessionAddress) -> ContextSnapshot | None:
    """The session's stored snapshot, read with a test's sync client."""
    return parse_stored(client.hget(snapshot_key(settings, address), "data"))


REDIS_SETTING_KEYS = ("redis_url", "redis_cluster", "queue_redis_url", "key_prefix")


def cli_uses(monkeypatch: Any, settings: Settings) -> None:
    """The CLI (``workers.cli.main``) in this process reaches ``settings``' Redis and deployment."""
    for key in REDIS_SETTING_KEYS:
        if getattr(settings, key) is not None:
            monkeypatch.setenv(f"OVSTREAM_{key.upper()}", str(getattr(settings, key)))
