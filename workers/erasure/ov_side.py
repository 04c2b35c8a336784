"""What OV keeps of an erased scope, removed, acting as the scope's user (workers.erasure).

OV 0.5.2 deletes one session (``DELETE /api/v1/sessions/{id}``: its messages and archives) or
one directory (``DELETE /api/v1/fs?recursive=true``: files and their index) at a time, and
lists a user's sessions (``GET /api/v1/sessions``) [read in the source, tested:
tests/integration/test_e2e_erase.py]. So, per scope:

- a user: every session OV lists for it (repair sessions included), then its memories, its
  agents' (peers') memories and OV's own privacy store (``viking://~/memories``, ``~/peers``,
  ``~/privacy``);
- an agent: its sessions (those ovstream knows, and any other in which it spoke: an assistant
  message with its ``peer_id``), the repair sessions of their commits, its memories
  (``viking://~/peers/<agent>``);
- a session: it and the repair sessions of its commits. Memories it gave rise to are the
  user's (OV merges them into the user's files): erase the user to remove those.

A phase 2 still running on a doomed session is cancelled and waited for first (it would write
memories after they were removed). Deleting what is gone already counts nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from core.backoff import Backoff
from core.erasure import ErasureScope
from core.ov.client import OVClient, OVError

log = logging.getLogger(__name__)

FINAL_TASK = frozenset({"completed", "failed", "cancelled"})
TASK_POLL_S = 0.5
USER_DIRECTORIES = ("viking://~/memories", "viking://~/peers", "viking://~/privacy")
CONTEXT_READ_TOKENS = 4000
LOCKED_BACKOFF = Backoff(0.5, 5.0)
LOCKED_TRIES = 8
"""Waits for a lock OV holds on what an erasure removes (0.5 s doubling to 5 s: about 26 s)."""
T = TypeVar("T")


async def erase_in_ov(
    ov: OVClient,
    scope: ErasureScope,
    known: set[str],
    repairs: set[str],
    *,
    dry_run: bool,
    task_wait_s: float,
) -> Counter[str]:
    """Remove (or count) the scope's sessions and memories in OV; what was removed, counted."""
    removed = Counter[str]()
    listed = set(await ov.list_sessions())
    doomed = await _sessions(ov, scope, listed, known | repairs)
    removed["ov_sessions"] += len(doomed)
    directories = list(USER_DIRECTORIES) if scope.kind == "user" else []
    if scope.kind == "agent":
        directories.append(f"viking://~/peers/{scope.agent}")
    if dry_run:
        for uri in directories:
            removed["ov_memory_files"] += await ov.files(uri)
        return removed
    for sid in sorted(doomed):
        await _stop_phase2(ov, sid, task_wait_s)
    for sid in sorted(doomed):
        try:
            await _unlocked(partial(ov.delete_session, sid), f"session {sid}")
        except OVError as exc:
            if exc.code != "NOT_FOUND":
                raise
    for uri in directories:
        try:
            answer = await _unlocked(partial(ov.rm, uri, recursive=True), uri)
        except OVError as exc:
            if exc.code != "NOT_FOUND":
                raise
            continue
        count = answer.get("estimated_deleted_count")
        removed["ov_memory_files"] += count if isinstance(count, int) else 0
    return removed


async def _unlocked(call: Callable[[], Awaitable[T]], what: str) -> T:
    """``call()``, tried again while OV answers CONFLICT (409: a lock on the path is held, by
    an extraction writing the user's memories or OV's own indexing), for ``LOCKED_TRIES`` waits
    of ``LOCKED_BACKOFF``; then its CONFLICT is raised (the erasure stops; run again, it resumes)."""
    for failures in range(LOCKED_TRIES + 1):
        try:
            return await call()
        except OVError as exc:
            if exc.code != "CONFLICT" or failures == LOCKED_TRIES:
                raise
            delay = LOCKED_BACKOFF.delay(failures + 1)
            log.info("OV holds a lock on %s (%s); trying again in %.1f s", what, exc.message, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _sessions(ov: OVClient, scope: ErasureScope, listed: set[str], known: set[str]) -> set[str]:
    if scope.kind == "user":
        return listed
    if scope.kind == "session":
        return {s for s in {scope.session or "", *known} if s in listed}
    assert scope.agent is not None
    spoke = [sid for sid in sorted(listed - known) if await _spoken_by(ov, sid, scope.agent)]
    return (known & listed) | set(spoke)


async def _spoken_by(ov: OVClient, sid: str, agent: str) -> bool:
    """Whether ``agent`` spoke in session ``sid`` (an assistant message with its ``peer_id``),
    in what is active or in its latest archive."""
    try:
        context = await ov.get_context(sid, token_budget=CONTEXT_READ_TOKENS)
        if any(m.peer_id == agent for m in context.messages):
            return True
        if context.stats.total_archives:
            archive = await ov.get_archive(sid, f"archive_{context.stats.total_archives:03d}")
            return any(m.peer_id == agent for m in archive.messages)
    except OVError as exc:
        log.warning("erase: session %s unreadable (%s); not taken for agent %s's", sid, exc, agent)
    return False


async def _stop_phase2(ov: OVClient, sid: str, wait_s: float) -> None:
    """Cancel the session's unfinished commit tasks and wait (``wait_s`` at most) for each to end."""
    try:
        running = [t for t in await ov.session_commit_tasks(sid) if t.status not in FINAL_TASK]
    except OVError as exc:
        log.warning("erase: the commit tasks of session %s unreadable (%s)", sid, exc)
        return
    deadline = time.monotonic() + wait_s
    for task in running:
        try:
            await ov.cancel_task(task.task_id)
        except OVError as exc:
            log.info("erase: task %s of session %s not cancelled (%s); waiting for it", task.task_id, sid, exc)
        while time.monotonic() < deadline:
            try:
                if (await ov.get_task(task.task_id)).status in FINAL_TASK:
                    break
            except OVError:
                break
            await asyncio.sleep(TASK_POLL_S)
