"""``ovstream demo``: what ``./run`` runs on a fresh machine.

Finds or starts a Redis and an OV (workers.dev.demo_services), runs the service
in process (``workers.dev.up.run_up``: capture, the RQ worker and the RPC on a
free loopback port) with a commit threshold low enough for the sample to
cross, replays ``config/sample_conversation.json`` as OpenClaw would
(workers.dev.demo_replay), and prints what assemble returns: the session's main
assemble (``[Session History Summary]``, systemPromptAddition, one line per
message), an auto-recall assemble in a new session, and the recorded commit
outcomes. Stops everything it started, or with ``--serve`` keeps serving
until Ctrl-C. Exit 0 when every step worked, 1 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from contextlib import ExitStack
from typing import Any

import httpx
import redis as redis_lib

from core.config import Settings
from core.ov.client import OVClient
from workers.dev.demo_replay import DemoFailure, DemoInterrupted, DemoResult, Replay, load_sample
from workers.dev.demo_report import format_assemble, format_outcomes, format_recall
from workers.dev.demo_services import REPO_ROOT, ServiceError, forget_demo_keys, provide_ov, provide_redis
from workers.dev.local_redis import port_free
from workers.store.connection import connect

DEFAULT_SAMPLE = REPO_ROOT / "config" / "sample_conversation.json"
DEFAULT_COMMIT_THRESHOLD = 200
"""pending_tokens that trigger a commit in the demo: the sample's ~300 tokens cross it at turn 3."""
DEFAULT_KEEP_RECENT = 2
"""Messages a demo commit keeps active (the default 10 would archive nothing of 8 messages)."""
PHASE2_POLL_S = 0.5
DEMO_SUFFIX = "-demo"
"""Appended to key_prefix and commit_queue when the demo shares the configured Redis."""
UP_START_TIMEOUT_S = 30.0
UP_STOP_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


def say(line: str = "") -> None:
    print(line, flush=True)


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the service (and what the demo started) running afterwards, until Ctrl-C",
    )
    parser.add_argument("--fake-ov", action="store_true", help="use the in-memory FakeOV, even if an OV answers")
    parser.add_argument(
        "--embedded", action="store_true", help="use an embedded in-process fakeredis, even if a Redis answers"
    )
    parser.add_argument("--sample", default=str(DEFAULT_SAMPLE), help="conversation to replay (JSON)")
    parser.add_argument(
        "--commit-threshold",
        type=int,
        default=DEFAULT_COMMIT_THRESHOLD,
        help=f"commitTokenThreshold for the demo (default {DEFAULT_COMMIT_THRESHOLD})",
    )
    parser.add_argument(
        "--keep-recent",
        type=int,
        default=DEFAULT_KEEP_RECENT,
        help=f"commitKeepRecentCount for the demo (default {DEFAULT_KEEP_RECENT})",
    )
    parser.add_argument("--verbose", action="store_true", help="show the service's INFO logs on stderr")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the demo's keys in a Redis it did not start (for `ovstream commits` afterwards)",
    )


def demo_settings(settings: Settings, **updates: Any) -> Settings:
    """``settings`` with ``updates``, validated again."""
    try:
        return Settings(**{**settings.model_dump(), **updates})
    except ValueError as exc:
        raise DemoFailure(f"invalid demo settings: {exc}") from exc


def _rpc_port(settings: Settings, serve: bool) -> int:
    """The configured port when serving (where a plugin looks), if free; else any free one."""
    if serve and port_free(settings.rpc_port, settings.rpc_host):
        return settings.rpc_port
    return 0


async def run_demo(
    settings: Settings, *, fake_ov: bool, sample_path: str, serve: bool = False, rpc_port: int = 0
) -> DemoResult:
    """Run ovstream in process, replay the sample, print assemble's answers; stop again."""
    from workers.dev.up import UpRuntime, run_up

    sample = load_sample(sample_path)
    started = asyncio.Event()
    holder: dict[str, UpRuntime] = {}

    def on_started(runtime: UpRuntime) -> None:
        holder["rt"] = runtime
        started.set()

    stop = StopSignal(asyncio.current_task())
    stop.install()
    up_task = asyncio.create_task(
        run_up(settings, fake_ov=fake_ov, host="127.0.0.1", port=rpc_port, started=on_started, install_signals=False),
        name="ovstream-up",
    )
    try:
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({waiter, up_task}, timeout=UP_START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if "rt" not in holder:
            reason = _task_error(up_task) if up_task.done() else f"not listening after {UP_START_TIMEOUT_S:g} s"
            raise DemoFailure(f"ovstream up did not start: {reason}")
        runtime = holder["rt"]
        rpc_url = f"http://127.0.0.1:{runtime.port}"
        say(
            f"ovstream up: RPC on {rpc_url}, capture worker {runtime.capture.consumer} on "
            f"{settings.shards} shards, RQ worker on queue {settings.commit_queue_name}"
        )
        say()
        transport = runtime.fake_ov.transport() if runtime.fake_ov is not None else None
        redis = connect(settings)
        try:
            async with (
                httpx.AsyncClient(base_url=rpc_url, timeout=120.0, trust_env=False) as rpc,
                OVClient.from_settings(settings, transport=transport) as ov,
            ):
                result = await Replay(
                    settings, rpc=rpc, redis=redis, ov=ov, sample=sample, say=say, stopped=lambda: stop.fired
                ).run()
        finally:
            redis.close()
        print_result(result)
        if serve:
            await serve_until_stopped(stop, up_task, rpc_url, settings, result, fake_ov=fake_ov)
        return result
    finally:
        stop.uninstall()
        runtime_ = holder.get("rt")
        if runtime_ is not None:
            runtime_.stop()
        else:
            up_task.cancel()
        try:
            async with asyncio.timeout(UP_STOP_TIMEOUT_S):
                await asyncio.shield(up_task)
        except (TimeoutError, asyncio.CancelledError):
            log.warning("ovstream up did not stop within %.0f s", UP_STOP_TIMEOUT_S)
        except Exception as exc:  # its failure was logged by run_up; the demo's own outcome stands
            log.warning("ovstream up ended with %r", exc)


def _task_error(task: asyncio.Task[Any]) -> str:
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    return repr(exc) if exc is not None else "it returned before listening"


def print_result(result: DemoResult) -> None:
    say()
    if result.main is not None:
        say(
            format_assemble(
                f"main assemble of session {result.session_id} (agent {result.agent_id}): "
                "what OpenClaw sends the model next",
                result.main,
            )
        )
        say()
    if result.recall is not None:
        say(
            format_recall(
                f"auto-recall assemble in a NEW session {result.recall_session_id}: the recallQuestion", result.recall
            )
        )
        say()
    say("== recorded commit outcomes ==")
    say(format_outcomes(result.outcomes))
    for note in result.notes:
        say(f"note: {note}")


class StopSignal:
    """SIGINT / SIGTERM while the demo runs: during the replay, cancel it (and flag it, so a
    cancellation swallowed somewhere below is still seen at the replay's next step);
    while serving, end the serving."""

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.fired = False
        self.serving = False
        self.event = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self.fire)

    def uninstall(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)  # SIGINT back to KeyboardInterrupt
        signal.signal(signal.SIGTERM, _term_as_interrupt)

    def fire(self) -> None:
        self.fired = True
        self.event.set()
        if not self.serving and self.task is not None:
            self.task.cancel()


async def serve_until_stopped(
    stop: StopSignal, up_task: asyncio.Task[Any], rpc_url: str, settings: Settings, result: DemoResult, *, fake_ov: bool
) -> None:
    stop.serving = True
    say()
    say(f"serving: RPC {rpc_url} (POST /v1/assemble, /v1/compact, /v1/tools/{{name}}; GET /healthz, /v1/status)")
    say(f"console: {rpc_url}/console (the deployment and a session inspector)")
    say(
        f"         Redis {settings.redis_url}, OV "
        f"{'in-memory FakeOV (in this process)' if fake_ov else settings.base_url}"
    )
    if not settings.embedded_redis:  # the README's commands, pointed at this demo
        say(f"         {demo_environment(settings)} {ovstream_program()} status")
        say(f"         {commits_command(settings, result)}")
    say("         Ctrl-C stops everything the demo started")
    waiter = asyncio.create_task(stop.event.wait())
    try:
        await asyncio.wait({waiter, up_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    say("stopping")


def _forget(redis_url: str, key_prefix: str, queue: str) -> None:
    try:
        gone = forget_demo_keys(redis_url, key_prefix, queue)
    except redis_lib.RedisError as exc:
        say(f"Redis: the demo's keys under {key_prefix}:* stay (removing them failed: {exc})")
        return
    say(f"Redis: removed the demo's {gone} key(s) under {key_prefix}:* and its queue (--keep leaves them)")


def demo_environment(settings: Settings) -> str:
    """The variables that point an operator's command at the demo's Redis and key prefix (it may
    have started a Redis of its own on a free port: the README's commands default to 6379)."""
    prefix = f" OVSTREAM_KEY_PREFIX={settings.key_prefix}" if settings.key_prefix.endswith(DEMO_SUFFIX) else ""
    return f"OVSTREAM_REDIS_URL={settings.redis_url}{prefix}"


def ovstream_program() -> str:
    """The ``ovstream`` this process was started as (``.venv/bin/ovstream`` from ``./run``)."""
    started_as = os.path.relpath(sys.argv[0]) if sys.argv and sys.argv[0].endswith("ovstream") else "ovstream"
    return started_as if not started_as.startswith("..") else sys.argv[0]


def commits_command(settings: Settings, result: DemoResult) -> str:
    """The command that lists the demo session's commits, with the Redis and prefix it ran with."""
    return (
        f"{demo_environment(settings)} {ovstream_program()} commits {result.session_id} "
        f"--session-key {result.session_key}"
    )


def _quiet_logs(args: argparse.Namespace) -> None:
    """The service's INFO logs would drown the demo's own lines: warnings only, unless asked."""
    if getattr(args, "verbose", False):
        return
    if str(getattr(args, "log_level", "INFO")).upper() == "INFO":
        logging.getLogger().setLevel(logging.WARNING)


def _term_as_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM unwinds like Ctrl-C, so what the demo started is stopped (a bare SIGTERM
    would leave openviking-server and redis-server, each in its own session, running).
    Raised here, not re-sent as SIGINT: a background job may have SIGINT ignored."""
    raise KeyboardInterrupt


def cli_demo(settings: Settings, args: argparse.Namespace) -> int:
    _quiet_logs(args)
    signal.signal(signal.SIGTERM, _term_as_interrupt)
    say("ovstream demo: the sample conversation through afterTurn -> capture -> commit -> phase 2 -> assemble")
    with ExitStack() as stack:
        try:
            redis_url, redis_kind = provide_redis(settings.redis_url, stack, say, embedded=args.embedded)
            base_url, ov_kind = provide_ov(settings.base_url, stack, say, fake=args.fake_ov)
            isolation: dict[str, Any] = {}
            if redis_kind == "configured":
                # A service may be running on that Redis: its streams, consumer group and RQ
                # queue are not the demo's to consume.
                isolation = {
                    "key_prefix": f"{settings.key_prefix}{DEMO_SUFFIX}",
                    "commit_queue": f"{settings.commit_queue_name}{DEMO_SUFFIX}",
                }
                say(
                    f"Redis: the demo's keys go under {isolation['key_prefix']}:*, its jobs on queue "
                    f"{isolation['commit_queue']} (a service on that Redis is left alone)"
                )
                if not args.keep:
                    stack.callback(_forget, redis_url, isolation["key_prefix"], isolation["commit_queue"])
            run_settings = demo_settings(
                settings,
                redis_url=redis_url,
                base_url=base_url,
                commit_token_threshold=args.commit_threshold,
                commit_keep_recent_count=args.keep_recent,
                phase2_poll_interval_s=PHASE2_POLL_S,
                **isolation,
            )
            result = asyncio.run(
                run_demo(
                    run_settings,
                    fake_ov=ov_kind == "fake",
                    sample_path=args.sample,
                    serve=args.serve,
                    rpc_port=_rpc_port(run_settings, args.serve),
                )
            )
        except (DemoInterrupted, asyncio.CancelledError, KeyboardInterrupt):
            print("ovstream demo: interrupted; stopping what it started", file=sys.stderr, flush=True)
            return 130
        except (ServiceError, DemoFailure) as exc:
            print(f"ovstream demo: FAILED: {exc}", file=sys.stderr, flush=True)
            say("stopping what the demo started")
            return 1
        if redis_kind == "configured" and args.keep and not args.serve:
            say(f"the demo's keys stay; its commits: {commits_command(run_settings, result)}")
        if result.failures:
            for failure in result.failures:
                print(f"ovstream demo: FAILED: {failure}", file=sys.stderr, flush=True)
            return 1
        say("ovstream demo: OK (stopping what it started)" if not args.serve else "ovstream demo: OK")
    return 0
