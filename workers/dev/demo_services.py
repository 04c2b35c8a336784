"""What ``ovstream demo`` (and bench/real_ov.py) needs running: a Redis and an OV.

Each is found or started, in order:

- Redis: ``settings.redis_url`` when it answers PING; else a ``redis-server``
  from PATH on a free loopback port (temp dir, no persistence); else the
  embedded ``fakeredis://``.
- OV: ``settings.base_url`` when ``GET /health`` answers; else, when
  ``find_openviking_server()`` finds the binary, the bundled deterministic model
  server plus a local ``openviking-server`` on free ports (workdir under
  ``.ovstream/`` in the repo, else a temp dir); else the in-memory FakeOV.

Everything started is registered on an ``ExitStack`` and stopped with it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import redis as redis_lib
from rq import Queue
from rq.job import Job
from rq.results import Result
from rq.worker_registration import WORKERS_BY_QUEUE_KEY

from workers.dev.local_ov import INSTALL_HINT, LocalOV, LocalOVError, find_openviking_server, start_local_ov
from workers.dev.local_redis import LocalRedisError, free_port, redis_answers, start_redis_server
from workers.dev.model_server import ModelServerHandle, start_model_server
from workers.store.connection import text
from workers.store.keys import Keys

REPO_ROOT = Path(__file__).resolve().parents[2]
WORK_ROOT = REPO_ROOT / ".ovstream"
"""Where the demo puts a local OV's workdir (git-ignored)."""
KEEP_WORKDIR_ENV = "OVSTREAM_KEEP_OV_WORKDIR"
OV_START_TIMEOUT_S = 120.0

Say = Callable[[str], None]


class ServiceError(RuntimeError):
    """A service the demo needs could not be found or started; the message says why."""


def ov_answers(base_url: str, timeout_s: float = 2.0) -> str | None:
    """OV's version when ``GET {base_url}/health`` says ok, else None."""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            r = client.get(f"{base_url.rstrip('/')}/health")
        body = r.json() if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return None
    if isinstance(body, dict) and body.get("status") in ("ok", "healthy"):
        return str(body.get("version") or "?")
    return None


def provide_redis(configured_url: str, stack: ExitStack, say: Say, *, embedded: bool = False) -> tuple[str, str]:
    """(redis_url, kind): kind is "configured", "started" or "embedded"."""
    if embedded:
        say("Redis: embedded fakeredis (in-process; --embedded)")
        return "fakeredis://", "embedded"
    if configured_url.startswith("fakeredis://"):
        say("Redis: embedded fakeredis (in-process; redis_url is fakeredis://)")
        return "fakeredis://", "embedded"
    if redis_answers(configured_url):
        say(f"Redis: using {_redact(configured_url)} (it answers PING)")
        return configured_url, "configured"
    exe = shutil.which("redis-server")
    if exe is not None:
        try:
            server = start_redis_server(exe)
        except LocalRedisError as exc:
            raise ServiceError(str(exc)) from exc
        stack.callback(server.stop)
        say(
            f"Redis: {_redact(configured_url)} does not answer; started redis-server "
            f"pid {server.proc.pid} at {server.url}"
        )
        return server.url, "started"
    say(
        f"Redis: {_redact(configured_url)} does not answer and redis-server is not installed; "
        "using embedded fakeredis (in-process)"
    )
    return "fakeredis://", "embedded"


def _redact(url: str) -> str:
    """``url`` without a password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


def _workdir() -> tuple[str, bool]:
    """(a fresh OV workdir, whether to delete it afterwards)."""
    keep = bool(os.environ.get(KEEP_WORKDIR_ENV))
    try:
        WORK_ROOT.mkdir(exist_ok=True)
        return tempfile.mkdtemp(prefix="demo-ov-", dir=WORK_ROOT), not keep
    except OSError:
        return tempfile.mkdtemp(prefix="ovstream-demo-ov-"), not keep


def _start_ov_interruptibly(workdir: str, model_url: str, binary: str, say: Say) -> LocalOV:
    """``start_local_ov`` on a thread: Ctrl-C during its health wait (which would leave the
    child running, its handle never returned) waits for the start to end and stops it."""
    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.join: a join interrupted by Ctrl-C marks the thread stopped

    def target() -> None:
        try:
            box["ov"] = start_local_ov(
                workdir, port=free_port(), model_url=model_url, binary=binary, timeout_s=OV_START_TIMEOUT_S
            )
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="ovstream-start-ov", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        say("OV: interrupted; stopping openviking-server once its start has ended")
        while not done.wait(0.2):
            pass
        if "ov" in box:
            box["ov"].stop()
        raise
    error = box.get("error")
    if isinstance(error, LocalOVError):
        raise ServiceError(f"openviking-server did not start: {error}") from error
    if error is not None:
        raise error
    ov: LocalOV = box["ov"]
    return ov


def start_local_stack(stack: ExitStack, say: Say) -> str:
    """The bundled model server plus a local openviking-server; returns OV's URL."""
    return start_local_stack_with_model(stack, say)[0]


def start_local_stack_with_model(stack: ExitStack, say: Say) -> tuple[str, ModelServerHandle]:
    """``start_local_stack``, also returning the model server (its mode, its counts: benches)."""
    binary = find_openviking_server()
    if binary is None:
        raise ServiceError(INSTALL_HINT)
    model = start_model_server("127.0.0.1", 0)
    stack.callback(model.stop)
    workdir, remove = _workdir()
    if remove:
        stack.callback(shutil.rmtree, workdir, True)
    say(
        f"OV: starting the bundled model server at {model.url} and openviking-server "
        f"({binary}) in {workdir} (about 10 s)"
    )
    ov = _start_ov_interruptibly(workdir, model.url, binary, say)
    stack.callback(ov.stop)
    say(f"OV: local openviking-server pid {ov.pid} at {ov.url} (healthy after {ov.startup_s:.1f} s, log {ov.log_path})")
    return ov.url, model


def provide_ov(base_url: str, stack: ExitStack, say: Say, *, fake: bool = False) -> tuple[str, str]:
    """(base_url, kind): kind is "configured", "local" or "fake"."""
    if fake:
        say("OV: in-memory FakeOV (--fake-ov)")
        return base_url, "fake"
    version = ov_answers(base_url)
    if version is not None:
        say(f"OV: using {base_url} (openviking {version}, /health ok)")
        return base_url, "configured"
    if find_openviking_server() is None:
        say(
            f"OV: {base_url} does not answer and openviking-server is not installed; "
            "using the in-memory FakeOV (install it with `scripts/bootstrap.sh openviking`)"
        )
        return base_url, "fake"
    say(f"OV: {base_url} does not answer")
    return start_local_stack(stack, say), "local"


def forget_demo_keys(redis_url: str, key_prefix: str, queue_name: str) -> int:
    """Delete what the demo wrote to a Redis it did not start: every key under its own
    ``key_prefix`` and its RQ queue, registries and jobs. Returns how many keys went."""
    client = redis_lib.Redis.from_url(redis_url)
    try:
        queue = Queue(queue_name, connection=client)
        registries = [
            queue.started_job_registry,
            queue.finished_job_registry,
            queue.failed_job_registry,
            queue.deferred_job_registry,
            queue.scheduled_job_registry,
            queue.canceled_job_registry,
        ]
        keys = Keys(key_prefix)
        lines = [keys.commit_line(text(m)) for m in client.zrange(keys.commit_lines(), 0, -1)]
        queued = [*queue.get_job_ids(), *(text(j) for line in lines for j in client.lrange(line, 0, -1))]
        jobs = {*queued, *(job for r in registries for job in r.get_job_ids())}
        doomed = [key for job in jobs for key in (Job.key_for(job), Result.get_key(job))]  # type: ignore[no-untyped-call]
        doomed += [r.key for r in registries] + [queue.key, WORKERS_BY_QUEUE_KEY % queue.name]
        for key in client.scan_iter(match="rq:worker:*", count=1000):  # live ones, and stopped ones (kept a minute)
            if client.type(key) == b"hash" and client.hget(key, "queues") == queue.name.encode():
                doomed.append(key)
        doomed += list(client.scan_iter(match=Keys(key_prefix).every_key(), count=1000))
        gone = sum(int(client.delete(*doomed[i : i + 500])) for i in range(0, len(doomed), 500))
        client.srem("rq:queues", queue.key, *lines)  # the lines register their lists there too
        return gone
    finally:
        client.close()
