"""``ovstream up``: capture, the commit worker and the RPC in one process.

For a single machine. The capture worker and the RPC (uvicorn serving
``workers.rpc.app.create_app``) share the event loop; RQ jobs run in an
``EmbeddedWorker`` thread (burst rounds with the scheduler). With
``redis_url = "fakeredis://"`` all of them use one in-process Redis;
``--fake-ov`` points everything at an in-memory FakeOV, so a demo needs
neither Redis nor OpenViking.

SIGINT/SIGTERM stop the server, then capture (finishing its round), then
the job thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn

from core.config import Settings
from core.defaults import STOP_GRACE_S, UP_JOB_THREAD_JOIN_S
from workers.capture.worker import CaptureWorker
from workers.commits import context as jobs
from workers.commits.worker import run_embedded_worker
from workers.store.connection import connect, connect_async

log = logging.getLogger(__name__)


class RpcNotListening(Exception):
    """uvicorn could not start (it logged why: a port in use, say)."""


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling (``up`` stops every part itself), and without
    its ``sys.exit`` when it cannot listen: a SystemExit out of a task escapes the event loop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def serve(self, sockets: list[Any] | None = None) -> None:
        try:
            await super().serve(sockets)
        except SystemExit as exc:
            raise RpcNotListening(f"uvicorn exited with {exc.code}") from None


@dataclass
class UpRuntime:
    """The running parts of ``up`` (tests and embedding callers stop it with ``stop()``)."""

    settings: Settings
    capture: CaptureWorker
    server: uvicorn.Server
    loop: asyncio.AbstractEventLoop
    fake_ov: Any = None
    stop_jobs: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Stop every part (call on the loop's thread; elsewhere use ``stop_threadsafe``)."""
        self.server.should_exit = True
        self.capture.stop()
        self.stop_jobs.set()

    def stop_threadsafe(self) -> None:
        self.loop.call_soon_threadsafe(self.stop)

    @property
    def port(self) -> int | None:
        """The port the RPC listens on, once started (useful with port 0)."""
        for server in getattr(self.server, "servers", []) or []:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return None


async def run_up(
    settings: Settings,
    *,
    fake_ov: bool = False,
    host: str | None = None,
    port: int | None = None,
    started: Callable[[UpRuntime], None] | None = None,
    install_signals: bool = True,
) -> int:
    """Run everything until stopped; ``started(runtime)`` is called once the RPC listens."""
    from workers.rpc.app import create_app

    transport: httpx.AsyncBaseTransport | None = None
    fake = None
    if fake_ov:
        from workers.dev.fake_ov.app import FakeOV

        fake = FakeOV()
        transport = fake.transport()
        jobs.set_ov_transport_factory(lambda _settings: transport)
        log.info("using the in-memory FakeOV (no OpenViking server)")
    capture = CaptureWorker(settings, ov_transport=transport)
    app = create_app(settings, redis=connect_async(settings), commit_redis=connect(settings), ov_transport=transport)
    config = uvicorn.Config(
        app,
        host=host or settings.rpc_host,
        port=settings.rpc_port if port is None else port,
        log_config=None,
        ssl_certfile=settings.rpc_tls_cert_file,
        ssl_keyfile=settings.rpc_tls_key_file,
    )
    loop = asyncio.get_running_loop()
    runtime = UpRuntime(settings, capture, _EmbeddedServer(config), loop, fake)
    job_thread = threading.Thread(
        target=run_embedded_worker,
        name="ovstream-jobs",
        args=(connect(settings), settings, runtime.stop_jobs),
        daemon=True,
    )
    if install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, runtime.stop)
    job_thread.start()
    capture_task = asyncio.create_task(capture.run(), name="capture")
    capture_task.add_done_callback(lambda _: runtime.stop())  # a dead capture takes the rest down
    server_task = asyncio.create_task(runtime.server.serve(), name="rpc")
    try:
        # uvicorn offers no "started" event to wait on
        while not runtime.server.started and not server_task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        if runtime.server.started:
            log.info(
                "ovstream up: rpc on http://%s:%s, capture %s, jobs on %s",
                config.host,
                runtime.port,
                capture.consumer,
                settings.commit_queue_name,
            )
            if started is not None:
                started(runtime)
        await asyncio.gather(server_task, return_exceptions=True)
    finally:
        runtime.stop()
        # each part stops within STOP_GRACE_S of being asked (twice that, then it is cancelled:
        # a stop that hangs must not keep the process, nor hide which part hung)
        _, late = await asyncio.wait({capture_task, server_task}, timeout=2 * STOP_GRACE_S)
        for task in late:
            log.warning("ovstream up: %s did not stop within %.0f s; cancelled", task.get_name(), 2 * STOP_GRACE_S)
            task.cancel()
        results = await asyncio.gather(capture_task, server_task, return_exceptions=True)
        await asyncio.to_thread(job_thread.join, UP_JOB_THREAD_JOIN_S)
        if fake_ov:
            jobs.set_ov_transport_factory(None)
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    code = 0
    for result in results:
        if isinstance(result, RpcNotListening):
            log.error("ovstream up: the RPC could not listen on %s:%s; stopped", config.host, config.port)
            code = 2
        elif isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            log.error("ovstream up: a part failed", exc_info=result)
            code = 1
    return code


def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fake-ov", action="store_true", help="use an in-memory FakeOV instead of OpenViking")
    parser.add_argument("--host", default=None, help="RPC listen address (default: settings rpc_host)")
    parser.add_argument("--port", type=int, default=None, help="RPC port (default: settings rpc_port)")


def cli_up(settings: Settings, args: argparse.Namespace) -> int:
    from workers.rpc.auth import exposure_problem

    problem = exposure_problem(settings, args.host or settings.rpc_host)
    if problem is not None:
        log.error("%s", problem)
        return 2
    return asyncio.run(run_up(settings, fake_ov=args.fake_ov, host=args.host, port=args.port))
