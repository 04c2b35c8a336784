"""The chaos tier's parts: a deployment of real OS processes, a load, faults and the checks.

``Deployment`` runs ``ovstream capture`` (several) and ``ovstream worker`` as separate
processes configured only by ``OVSTREAM_*`` (as ``Procfile`` runs them), against a durable
redis-server and a real openviking-server; each can be SIGKILLed and started again.
``Load`` publishes every session's turns in order from a thread, as the plugin does:
a publish that fails (Redis away) is sent again with the same event id. ``Ledger`` reads
back what OV holds and what the commit records say.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from redis.exceptions import ClusterDownError, RedisClusterException, TryAgainError

from core.config import Settings
from core.events import CommitOutcome, TurnEvent
from core.session import SessionAddress, shard_of
from tests.helpers.e2e import ovstream_command, settings_env
from tests.helpers.waiting import wait_until
from workers.commits.records import CommitRecords
from workers.store.applied import parse_id
from workers.store.connection import REDIS_ERRORS, connect, failing_over, text
from workers.store.keys import Keys
from workers.store.streams import NotReplicated, publish_turn

FILLER = " ".join(f"word{i}" for i in range(36))
"""Padding that gives each message some 50 tokens, so sessions cross the commit threshold."""


def chaos_turn(session: str, index: int, said: Callable[[str, int], str] = lambda s, i: FILLER) -> TurnEvent:
    """Turn ``index`` of ``session`` as afterTurn sends it: the whole transcript so far. Each
    message starts with ``<session>:q<i>`` / ``<session>:a<i>``, its identity in OV; the user
    says ``said(session, i)`` after it (filler: nothing a memory is made of)."""
    messages: list[dict[str, Any]] = []
    for i in range(index + 1):
        messages.append({"role": "user", "content": f"{session}:q{i} {said(session, i)}"})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"{session}:a{i} {FILLER}"}]})
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=messages,
        pre_prompt_message_count=2 * index,
        published_at=time.time(),
    )


def expected_ids(session: str, turns: int) -> list[str]:
    return [f"{session}:{kind}{i}" for i in range(turns) for kind in ("q", "a")]


@dataclass
class Deployment:
    """ovstream's processes, by name ("capture-a", "worker", ...), each in its own process group."""

    values: dict[str, Any]
    workdir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.settings = Settings(**self.values)
        self.env = settings_env(self.values)

    def start(self, name: str, tree: Path | None = None, args: tuple[str, ...] = ()) -> None:
        """Start ``name`` (with the command's ``args``) from this checkout, or from the source
        ``tree`` of another release (its packages ahead of this checkout's on the path, with
        this one's dependencies)."""
        role = name.split("-", 1)[0]
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        command = [*ovstream_command(), role] if tree is None else [sys.executable, "-m", "workers.cli", role]
        command += args
        env = self.env if tree is None else {**self.env, "PYTHONPATH": str(tree)}
        self.procs[name] = subprocess.Popen(
            command,
            cwd=self.workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def kill(self, name: str) -> None:
        """SIGKILL the process and its group: no cleanup of any kind."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def terminate(self, name: str, timeout_s: float = 30.0, *, signalled: bool = False) -> int:
        """SIGTERM, as an operator or orchestrator stops it; its exit code. A hang fails with
        its threads' stacks (SIGUSR1: workers.cli) from its log; then it is killed."""
        proc = self.procs[name]
        if proc.poll() is None and not signalled:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGUSR1)
                time.sleep(1.0)
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise AssertionError(f"{name} ignored SIGTERM:\n{self.log(name, lines=200)}") from None

    def restart(self, name: str) -> None:
        self.kill(name)
        self.start(name)

    def exited(self) -> dict[str, int]:
        """Processes that ended on their own, with their exit codes."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for name in self.procs:
            self.terminate(name, timeout_s=20, signalled=True)

    def log(self, name: str, lines: int = 40) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


REDIS_AWAY = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
    redis.OutOfMemoryError,
)
"""What a publisher sees while Redis, or a cluster node, is down, starting again or full (the
plugin keeps such a turn and sends it again)."""


class Load:
    """Publishes turns of each session, round robin, ``rate`` turns a second, until ``finish``
    (then to the end of the round: every session has as many turns)."""

    def __init__(
        self, settings: Settings, sessions: list[str], rate: float, turn: Callable[[str, int], TurnEvent] = chaos_turn
    ) -> None:
        self.client = connect(settings, fail_fast=True)
        self.settings, self.sessions, self.rate, self.turn = settings, sessions, rate, turn
        self.finishing = threading.Event()
        self.published: dict[str, int] = dict.fromkeys(sessions, 0)
        self.last_ids: dict[int, str] = {}
        """Shard -> stream id of the newest entry published there."""
        self.resends = 0
        self.longest_publish_s = 0.0
        """The longest one publish took, resends included: the pause a publisher saw."""
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Load:
        self.thread.start()
        return self

    def _publish(self, event: TurnEvent) -> str:
        started = time.monotonic()
        try:
            while True:
                try:
                    return publish_turn(self.client, self.settings, event)
                except NotReplicated:
                    pass  # acknowledged by no replica (publish_replicas): not delivered
                except redis.RedisError as exc:
                    if not (isinstance(exc, REDIS_AWAY) or failing_over(exc)):
                        raise
                self.resends += 1  # the same event again: capture drops a copy by its event id
                time.sleep(0.2)
        finally:
            self.longest_publish_s = max(self.longest_publish_s, time.monotonic() - started)

    def _run(self) -> None:
        try:
            index = 0
            while not self.finishing.is_set():
                for session in self.sessions:
                    started = time.monotonic()
                    stream_id = self._publish(self.turn(session, index))
                    shard = shard_of(session, self.settings.shards)
                    with self.lock:
                        self.published[session] = index + 1
                        self.last_ids[shard] = stream_id
                    time.sleep(max(0.0, 1 / self.rate - (time.monotonic() - started)))
                index += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def marks(self) -> dict[int, str]:
        with self.lock:
            return dict(self.last_ids)

    def running(self) -> bool:
        return self.thread.is_alive() and not self.finishing.is_set()

    def finish(self, timeout_s: float) -> int:
        """Stop after the current round; the number of turns every session got."""
        self.finishing.set()
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise AssertionError("the load did not finish")
        if self.error is not None:
            raise self.error
        self.client.close()
        turns = set(self.published.values())
        assert len(turns) == 1, self.published
        return turns.pop()


class Assembles:
    """Asks the RPC to assemble each session's next turn, round robin, until stopped: what it
    answered (status codes), the longest answer, and any answer that showed a turn twice."""

    def __init__(self, url: str, load: Load, sessions: list[str]) -> None:
        self.url, self.load, self.sessions = url, load, sessions
        self.statuses: Counter[int] = Counter()
        self.twice: list[str] = []
        self.longest_s = 0.0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos-assembles", daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as http:
            for session in itertools.cycle(self.sessions):
                if self.stopping.is_set():
                    return
                turns = self.load.published[session]
                messages = chaos_turn(session, turns - 1).messages if turns else []
                body = {"sessionId": session, "messages": [*messages, {"role": "user", "content": f"{session}:next"}]}
                started = time.monotonic()
                try:
                    answer = http.post(f"{self.url}/v1/assemble", json=body)
                except httpx.HTTPError:
                    self.statuses[0] += 1  # no answer at all counts against it too
                    continue
                self.longest_s = max(self.longest_s, time.monotonic() - started)
                self.statuses[answer.status_code] += 1
                if answer.status_code == 200:
                    ids = [_turn_id(m) for m in answer.json()["messages"]]
                    shown = [i for i in ids if i.startswith(f"{session}:")]
                    if len(shown) != len(set(shown)):
                        self.twice.append(f"{session}: {shown}")
                time.sleep(0.05)

    def start(self) -> Assembles:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


def _turn_id(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content or [])
    return text.split(" ", 1)[0]


class Ledger:
    """What Redis and OV say about the deployment's sessions (read-only)."""

    def __init__(self, settings: Settings, ov_url: str, sessions: list[str]) -> None:
        self.redis = connect(settings, fail_fast=True)
        self.settings, self.sessions = settings, sessions
        self.ov = httpx.Client(base_url=ov_url, timeout=30, trust_env=False)

    def close(self) -> None:
        self.redis.close()
        self.ov.close()

    def caught_up(self, marks: dict[int, str], *, some_lost: bool = False) -> bool:
        """Every entry up to ``marks`` (shard -> stream id) read and acked by capture. With
        ``some_lost`` (a failover without ``publishReplicas`` may lose a stream's newest
        entries), up to what the stream still has of them."""
        try:
            for shard, mark in marks.items():
                stream = Keys(self.settings.key_prefix).stream(shard)
                if some_lost:
                    kept = text(self.redis.xinfo_stream(stream)["last-generated-id"])
                    mark = min(mark, kept, key=parse_id)
                groups = {g["name"].decode(): g for g in self.redis.xinfo_groups(stream)}
                group = groups.get(self.settings.consumer_group)
                if group is None or parse_id(text(group["last-delivered-id"])) < parse_id(mark):
                    return False
                if self.redis.xpending_range(stream, self.settings.consumer_group, "-", mark, 1):
                    return False
        except REDIS_ERRORS:  # a cluster's "no node reachable" is no RedisError
            return False
        return True

    def commits(self, session: str) -> list[CommitOutcome]:
        return CommitRecords(self.redis, self.settings).list(SessionAddress(session, "main", None))

    def unsettled(self) -> set[str]:
        """Commit ids with no final outcome yet (Redis away: unknown, so reported unsettled)."""
        try:
            return {
                o.commit_id
                for s in self.sessions
                for o in self.commits(s)
                if o.status not in ("completed", "failed", "skipped", "timeout")
            }
        except REDIS_ERRORS:
            return {"?"}

    def ov_ids(self, session: str) -> list[str]:
        """The first word of every message OV holds for the session: archives, then active."""
        ids: list[str] = []
        archives = sorted(
            o.archive_uri.rsplit("/", 1)[-1] for o in self.commits(session) if o.status == "completed" and o.archive_uri
        )
        for archive in archives:
            body = self.ov.get(f"/api/v1/sessions/{session}/archives/{archive}").raise_for_status().json()
            ids += [_first_word(m) for m in body["result"]["messages"]]
        context = self.ov.get(f"/api/v1/sessions/{session}/context", params={"token_budget": "1000000"})
        ids += [_first_word(m) for m in context.raise_for_status().json()["result"]["messages"]]
        return ids

    def task_status(self, task_id: str) -> str:
        return str(self.ov.get(f"/api/v1/tasks/{task_id}").raise_for_status().json()["result"]["status"])


def _first_word(message: dict[str, Any]) -> str:
    for part in message.get("parts") or []:
        if part.get("type") == "text":
            return str(part.get("text", "")).split(" ", 1)[0]
    return ""


def measure(until: Callable[[], bool], *, timeout_s: float, what: str) -> float:
    """Seconds until ``until()`` holds (``wait_until``, checked every 0.1 s)."""
    started = time.monotonic()
    wait_until(until, what, timeout_s=timeout_s, interval_s=0.1)
    return time.monotonic() - started
