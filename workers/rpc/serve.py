"""``ovstream rpc``: the RPC app (workers.rpc.app) served by uvicorn, with uvloop and
httptools, in one process or ``--workers N``; refused at start, in one line, when it would
listen beyond loopback without a credential or its deployment runs with other ``shards``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI

from core.config import Settings
from core.config_load import load_settings
from core.ov.version import check_at_start
from workers import logs
from workers.rpc.app import create_app
from workers.rpc.auth import exposure_problem
from workers.store.connection import REDIS_ERRORS, connect
from workers.store.deployment import DeploymentMismatch, check_deployment

log = logging.getLogger("workers.rpc.app")  # the lines an operator knows, as before the split

LOG_LEVEL_ENV = "OVSTREAM_LOG_LEVEL"
"""The log level the serving processes of ``--workers N`` take from their parent."""


def add_rpc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="listen address (default: settings rpc_host)")
    parser.add_argument("--port", type=int, help="listen port (default: settings rpc_port)")
    parser.add_argument("--workers", type=int, help="serving processes (default: settings rpc_workers)")


def app_from_environment() -> FastAPI:
    """The app of one process of ``ovstream rpc --workers N``: settings and logging as the
    parent's (the environment, ``$OVSTREAM_CONFIG``), since uvicorn starts each afresh."""
    settings = load_settings()
    logs.configure("rpc", level=os.environ.get(LOG_LEVEL_ENV, "INFO"), json_lines=settings.log_format == "json")
    return create_app(settings)


class StopsCleanly(uvicorn.Server):
    """uvicorn, but exiting 0 after SIGTERM or SIGINT: uvicorn re-raises the signal once it
    has shut down (the process then dies of it), which a supervisor may count as a crash."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def _deployment_agrees(settings: Settings) -> bool:
    """False (logged) when the deployment in Redis runs with other ``shards``; Redis away: the
    RPC serves anyway (assemble passes through until it is back), so this is not waited for."""
    if settings.embedded_redis:
        return True
    client = connect(settings, fail_fast=True)
    try:
        check_deployment(client, settings)
    except DeploymentMismatch as exc:
        log.error("%s", exc)
        return False
    except REDIS_ERRORS as exc:
        log.warning("could not compare shards with the deployment's (Redis: %s); serving anyway", exc)
    finally:
        client.close()
    return True


def cli_rpc(settings: Settings, args: argparse.Namespace) -> int:
    host = getattr(args, "host", None) or settings.rpc_host
    port = getattr(args, "port", None) or settings.rpc_port
    problem = exposure_problem(settings, host)
    if problem is not None:
        log.error("%s", problem)
        return 2
    if not settings.credentials and settings.rpc_allow_unauthenticated:
        log.warning(
            "ovstream rpc on %s without authentication (rpcAllowUnauthenticated): "
            "anyone reaching it acts as this service",
            host,
        )
    if not _deployment_agrees(settings) or not check_at_start(settings, "ovstream rpc"):
        return 2
    tls = settings.rpc_tls_cert_file is not None
    log.info(
        "ovstream rpc listening on %s://%s:%d (OV %s, Redis %s, %d RPC credential(s))",
        "https" if tls else "http",
        host,
        port,
        settings.base_url,
        settings.redacted_redis_url(),
        len(settings.credentials),
    )
    # log_config=None: keep the logging the CLI configured instead of uvicorn's own.
    # uvloop and httptools: the faster event loop and HTTP parser (bench/RESULTS.md).
    serving: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_config": None,
        "loop": "uvloop",
        "http": "httptools",
        "ssl_certfile": settings.rpc_tls_cert_file,
        "ssl_keyfile": settings.rpc_tls_key_file,
    }
    workers = getattr(args, "workers", None) or settings.rpc_workers
    if workers == 1:
        StopsCleanly(uvicorn.Config(create_app(settings), **serving)).run()
        return 0
    # Several processes on one socket: uvicorn's supervisor starts each with app_from_environment.
    if getattr(args, "config", None):
        os.environ["OVSTREAM_CONFIG"] = str(args.config)
    os.environ[LOG_LEVEL_ENV] = getattr(args, "log_level", "INFO")
    uvicorn.run("workers.rpc.serve:app_from_environment", factory=True, workers=workers, **serving)
    return 0
