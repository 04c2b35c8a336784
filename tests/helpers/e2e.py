"""Helpers of the end-to-end tests: the ``ovstream up`` service as a subprocess, OpenClaw-shaped
conversations, and bounded waits. The e2e tests drive ovstream only through its public surfaces:
turn events published with ``workers.store.streams.publish_turn`` (what the plugin's afterTurn
does) and HTTP calls to the RPC. What they check comes from the RPC answers, the commit records
(``CommitRecords`` and the ``ovstream commits`` CLI) and, to know when capture caught up, OV.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import redis

from core.config import Settings
from core.events import CommitOutcome, TurnEvent
from core.ids import ov_session_id, resolve_agent_id
from core.messages.tokens import estimate_tokens
from core.ov.envelope import error_for, is_passing
from core.session import SessionAddress
from tests.helpers.waiting import wait_until
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.dev.local_redis import free_port
from workers.store.keys import Keys
from workers.store.streams import publish_turn

DEADLINE_S = 90.0
"""Every wait is bounded by this: a hang fails the test instead of stalling the tier."""
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 20.0
THRESHOLD = 300
"""commitTokenThreshold of the e2e services: a few turns of the conversations below cross it."""
KEEP_RECENT = 2
"""commitKeepRecentCount: a threshold commit keeps the last turn (user + assistant) active."""
SUMMARY_PREFIX = "[Session History Summary]"
RECALL_MARKER = "Source: openviking-auto-recall"
MAIN_CALL = {"prompt": "Answer the user.", "availableTools": ["ov_archive_search", "ov_archive_expand"]}
"""The keys that make an assemble request OpenClaw's main call."""

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, *, timeout_s: float = DEADLINE_S, interval_s: float = 0.2) -> T:
    """``tests.helpers.waiting.wait_until`` with the end-to-end tier's default deadline."""
    return wait_until(check, what, timeout_s=timeout_s, interval_s=interval_s)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- conversations --------------------------------------------------------------------


class Conversation:
    """One OpenClaw session: ``turn()`` adds an exchange, returns afterTurn's whole-transcript event."""

    def __init__(self, name: str, *, user: str | None = None, session_id: str | None = None) -> None:
        self.session_id = session_id or unique(f"e2e-{name}")
        self.session_key = f"agent:main:{self.session_id}"
        self.user = user
        self.messages: list[dict[str, Any]] = []

    @property
    def ov_session_id(self) -> str:
        return ov_session_id(self.session_id, self.session_key)

    @property
    def agent_id(self) -> str:
        return resolve_agent_id(self.session_key, None, "")

    @property
    def ref(self) -> dict[str, Any]:
        """The session fields of an RPC request."""
        return {"sessionId": self.session_id, "sessionKey": self.session_key}

    def turn(self, user_text: str, assistant_text: str) -> TurnEvent:
        before = len(self.messages)
        now_ms = int(time.time() * 1000)
        self.messages.append({"role": "user", "content": user_text, "timestamp": now_ms})
        self.messages.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": assistant_text}],
                "stopReason": "stop",
                "timestamp": now_ms + 1,
            }
        )
        return TurnEvent(
            event_id=uuid.uuid4().hex,
            session_id=self.session_id,
            session_key=self.session_key,
            messages=[dict(m) for m in self.messages],
            pre_prompt_message_count=before,
            published_at=time.time(),
            user=self.user,
        )

    def texts(self) -> list[str]:
        return [message_text(m) for m in self.messages]


def turn_tokens(turns: Iterable[tuple[str, str]]) -> list[int]:
    """OV's pending-token estimate of each turn (per message, rounded up)."""
    return [estimate_tokens(u) + estimate_tokens(a) for u, a in turns]


def check_crosses_at_last_turn(turns: list[tuple[str, str]]) -> None:
    """The conversation design: only the last turn takes pending tokens over the threshold,
    so capture asks for exactly one commit."""
    tokens = turn_tokens(turns)
    assert sum(tokens[:-1]) < THRESHOLD <= sum(tokens), (tokens, THRESHOLD)


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def first_text(message: dict[str, Any]) -> str:
    """The first text block of a message (string content counts as one)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            return str(block.get("text", ""))
    return ""


# --- the service ----------------------------------------------------------------------------


def ovstream_command() -> list[str]:
    """How to run the ``ovstream`` CLI of this checkout."""
    script = Path(sys.executable).with_name("ovstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "workers.cli"]


def settings_env(values: dict[str, Any]) -> dict[str, str]:
    """This process's environment without any ``OVSTREAM_*`` of its own, plus ``values`` as
    ``OVSTREAM_*`` variables (so a started process is configured by them alone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}
    for key, value in values.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(value)
        env[f"OVSTREAM_{key.upper()}"] = json.dumps(value) if isinstance(value, dict) else str(value)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


class Service:
    """``ovstream up`` (capture + RQ worker + RPC in one process) as a subprocess."""

    def __init__(
        self,
        *,
        ov_url: str,
        redis_url: str,
        workdir: Path,
        user_api_keys: dict[str, str] | None = None,
        **settings: Any,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "ovstream-up.log"
        self.values: dict[str, Any] = {
            "base_url": ov_url,
            "redis_url": redis_url,
            "rpc_port": self.port,
            "commit_token_threshold": THRESHOLD,
            "commit_keep_recent_count": KEEP_RECENT,
            "phase2_poll_interval_s": 0.3,
            "phase2_deadline_s": 120.0,
            "compact_wait_s": DEADLINE_S,
            "capture_block_ms": 200,
            "shards": 2,
            # named, not defaulted: the test's Settings must not pick up a developer's OVSTREAM_*
            "key_prefix": "ovstream",
            "consumer_group": "capture",
            "commit_queue": "ovstream-commits",
            "user_api_keys": dict(user_api_keys or {}),
            **settings,
        }
        self.settings = Settings(**self.values)
        self.env = settings_env(self.values)
        self.redis = redis.Redis.from_url(redis_url)
        self.http = httpx.Client(base_url=self.url, timeout=DEADLINE_S + 30, trust_env=False)
        self.proc: subprocess.Popen[bytes] | None = None

    # lifecycle

    def start(self) -> Service:
        # cwd: a directory without config/ovstream.toml, so only the env configures it.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*ovstream_command(), "up"],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._healthy, "ovstream up healthy (/healthz ok)", timeout_s=START_DEADLINE_S)
        return self

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"ovstream up exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            r = self.http.get("/healthz", timeout=5)
        except httpx.HTTPError:
            return False
        return r.status_code == 200 and r.json().get("status") == "ok"

    def stop(self) -> None:
        """SIGTERM, as an operator stops it: it must exit 0, log no traceback and leave
        nothing of its process group behind (SIGKILL if it hangs, and fail)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise AssertionError(f"ovstream up ignored SIGTERM:\n{self.log_tail()}") from None
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            pass
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("ovstream up left processes in its group")
        assert proc.returncode == 0, f"ovstream up exited with {proc.returncode}:\n{self.log_tail()}"
        log = self.log_path.read_text(errors="replace")
        at = log.find("Traceback")
        assert at < 0, f"ovstream up logged a traceback:\n{log[max(0, at - 2000) : at + 4000]}"

    def close(self) -> None:
        """Stop the service and close the test's own clients."""
        try:
            self.stop()
        finally:
            self.http.close()
            self.redis.close()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # capture

    def publish(self, event: TurnEvent) -> str:
        return publish_turn(self.redis, self.settings, event)

    def drained(self) -> bool:
        """Every published entry of every shard read and acknowledged by capture."""
        keys = Keys(self.settings.key_prefix)
        for shard in range(self.settings.shards):
            stream = keys.stream(shard)
            if not self.redis.exists(stream):
                continue
            groups = {g["name"].decode(): g for g in self.redis.xinfo_groups(stream)}
            group = groups.get(self.settings.consumer_group)
            if group is None or group["pending"] or group.get("lag") != 0:
                return False
        return True

    def wait_drained(self) -> None:
        wait_for(self.drained, "capture acknowledging every published turn")

    # the RPC

    def post(self, path: str, body: dict[str, Any], *, api_key: str | None = None) -> dict[str, Any]:
        headers = {"X-OpenViking-API-Key": api_key} if api_key else {}
        r = self.http.post(path, json=body, headers=headers)
        assert r.status_code == 200, f"{path}: {r.status_code} {r.text}\n--- service log ---\n{self.log_tail()}"
        return r.json()

    def assemble(
        self,
        conv: Conversation,
        messages: list[dict[str, Any]] | None = None,
        *,
        main: bool,
        api_key: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        body = {**conv.ref, "messages": conv.messages if messages is None else messages, **extra}
        if main:
            body.update(MAIN_CALL)
        return self.post("/v1/assemble", body, api_key=api_key)

    def tool(
        self, name: str, params: dict[str, Any], *, conv: Conversation | None = None, api_key: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"params": params, **(conv.ref if conv else {})}
        return self.post(f"/v1/tools/{name}", body, api_key=api_key)

    # commit records

    def commits(self, conv: Conversation) -> list[CommitOutcome]:
        return CommitRecords(self.redis, self.settings).list(
            SessionAddress(conv.ov_session_id, conv.agent_id, conv.user)
        )

    def wait_commits(self, conv: Conversation, count: int, *, timeout_s: float = DEADLINE_S) -> list[CommitOutcome]:
        """The session's commit records once ``count`` of them are final."""

        def done() -> list[CommitOutcome] | None:
            outcomes = self.commits(conv)
            final = [o for o in outcomes if o.status in FINAL_STATUSES]
            return outcomes if len(final) >= count else None

        return wait_for(done, f"{count} final commit(s) of {conv.session_id}", timeout_s=timeout_s, interval_s=0.25)

    def commits_cli(self, conv: Conversation) -> str:
        """``ovstream commits <sessionId> --session-key K [--user U]`` as an operator runs it."""
        args = [*ovstream_command(), "commits", conv.session_id, "--session-key", conv.session_key]
        if conv.user:
            args += ["--user", conv.user]
        done = subprocess.run(
            args, check=False, cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=DEADLINE_S
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        return done.stdout


def commit_rows(cli_output: str) -> list[dict[str, str]]:
    """The table ``ovstream commits`` prints, as dicts keyed by its header."""
    lines = [line for line in cli_output.splitlines() if line.strip()]
    header_at = next(i for i, line in enumerate(lines) if line.startswith("COMMIT"))
    header = lines[header_at]
    names = ["COMMIT", "REASON", "STATUS", "REQUESTED (UTC)", "FINISHED (UTC)", "MEMORIES", "ARCHIVE", "ERROR"]
    starts = [header.index(n) for n in names]
    rows = []
    for line in lines[header_at + 1 :]:
        cells = [line[s:e].strip() for s, e in zip(starts, [*starts[1:], None])]
        rows.append(dict(zip(names, cells)))
    return rows


class OVSession:
    """Direct reads of OV, only to know when capture has caught up (never to drive ovstream)."""

    def __init__(self, ov_url: str, api_key: str | None = None) -> None:
        headers = {"X-API-Key": api_key} if api_key else {}
        self.http = httpx.Client(base_url=ov_url, headers=headers, timeout=60, trust_env=False)

    def state(self, ov_sid: str) -> dict[str, Any] | None:
        r = self.http.get(f"/api/v1/sessions/{ov_sid}")
        # none yet, or OV read its metadata mid-write (a passing 400: is_passing): asked again
        if r.status_code == 404 or (r.status_code == 400 and is_passing(error_for("", r.text, status=400))):
            return None
        r.raise_for_status()
        return r.json()["result"]

    def context(self, ov_sid: str, budget: int = 128_000) -> dict[str, Any]:
        r = self.http.get(f"/api/v1/sessions/{ov_sid}/context", params={"token_budget": budget})
        r.raise_for_status()
        return r.json()["result"]

    def wait_total_messages(self, ov_sid: str, count: int) -> dict[str, Any]:
        """The session state once OV holds ``count`` messages ever added (capture caught up)."""

        def caught_up() -> dict[str, Any] | None:
            state = self.state(ov_sid)
            return state if state and state.get("total_message_count", 0) >= count else None

        return wait_for(caught_up, f"OV session {ov_sid} holding {count} messages")

    def close(self) -> None:
        self.http.close()


def workdir_for(tmp_root: Path, name: str) -> Path:
    path = tmp_root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
