"""The RPC service (``ovstream rpc``): assemble, compact and the agent tools over HTTP.

FastAPI, served by uvicorn. The OpenAPI spec is at ``/openapi.json``. Every
error answer is ``{"error": {"code", "message", "field"?}}`` (workers.rpc.responses)
with a 4xx (bad input, unknown tool or session, a body over ``maxBodyBytes``),
502 (OV failed) or 503 (OV or Redis unreachable); a 500 means a bug and never
carries a stack trace.

Responses are encoded with msgspec and returned as raw bytes: assemble's
answers hold whole transcripts, and FastAPI's own response validation and
encoding of them would cost more than building them from the snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx
import redis as redis_lib
import redis.asyncio as aioredis
from fastapi import FastAPI, Query, Request
from fastapi.responses import PlainTextResponse, Response

from core.config import Settings
from core.defaults import STOP_GRACE_S
from core.ov.client import OVClient
from workers.rpc.assemble_http import AssembleCall, RpcApp, caller_of
from workers.rpc.auth import RequireToken
from workers.rpc.compact import compact
from workers.rpc.console.routes import install_console
from workers.rpc.context import Services
from workers.rpc.erase import EraseReceipt, EraseRequest, erase_route
from workers.rpc.imports import ImportOutcomesRequest, ImportOutcomesResponse, import_outcomes
from workers.rpc.metrics import CONTENT_TYPE, RpcMetrics
from workers.rpc.models import (
    AssembleResponse,
    CompactRequest,
    CompactResponse,
    ErrorResponse,
    HealthResponse,
    SubagentAnswer,
    SubagentEnded,
    SubagentRef,
    SubagentSpawn,
    ToolRequest,
    ToolResponse,
    assemble_request_schema,
)
from workers.rpc.plugins import PluginGate, SeenPlugins
from workers.rpc.responses import ERROR_ANSWERS, BodyLimit, install_error_handlers, json_response
from workers.rpc.subagents import Identity, prepare_spawn, roll_back_spawn, spawn_ended
from workers.rpc.tools.registry import run_tool, tools
from workers.rpc.usage import USAGE_BUCKETS_MAX, UsageAnswer, usage_route
from workers.status import LAG_SAMPLE_INTERVAL_S, read_scaling, read_status, sample_lag
from workers.store.connection import REDIS_ERRORS, connect, connect_async
from workers.store.event_loop import quiet_dropped_connections
from workers.store.health import forget_health, record_health
from workers.store.usage import count_ov_request, flush
from workers.version import installed_version

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0
"""How long /healthz waits for Redis and for OV before calling either unreachable."""


def create_app(
    settings: Settings,
    *,
    redis: aioredis.Redis | None = None,
    commit_redis: redis_lib.Redis | None = None,
    ov_transport: httpx.AsyncBaseTransport | None = None,
    direct: bool = False,
) -> FastAPI:
    """The RPC app. ``redis`` (asyncio: every Redis call on the event loop),
    ``commit_redis`` (sync: the RQ commit queue, used from threads only) and
    ``ov_transport`` replace the real connections (tests, the embedded mode);
    ``direct`` serves the main assemble from OV /context on every call instead
    of the snapshot (the benchmark's comparison)."""
    own_redis = redis is None
    own_commit_redis = commit_redis is None
    redis_client = redis if redis is not None else connect_async(settings, fail_fast=True)
    commit_client = commit_redis if commit_redis is not None else connect(settings, fail_fast=True)
    ov = OVClient.from_settings(settings, transport=ov_transport, on_request=count_ov_request(settings))
    svc = Services(
        settings=settings,
        redis=redis_client,
        commit_redis=commit_client,
        ov=ov,
        metrics=RpcMetrics(commit_client, settings),
        direct=direct,
        ov_transport=ov_transport,
    )

    plugins = SeenPlugins()
    """The plugin versions that called lately (the process's health record says them)."""
    ov_closed = False

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The app may be started again after a shutdown (test clients do that):
        # a closed OV pool is replaced, not reused.
        nonlocal ov_closed
        if ov_closed:
            svc.ov = OVClient.from_settings(settings, transport=ov_transport, on_request=count_ov_request(settings))
            ov_closed = False
        svc.versions.start()
        loop = asyncio.get_running_loop()
        quiet_dropped_connections(loop)
        name = f"rpc-{socket.gethostname()}-{os.getpid()}"
        sampler, beat = loop.create_task(_sample_lag(svc)), loop.create_task(_beat(svc, name, plugins))
        yield
        sampler.cancel()
        beat.cancel()
        try:  # bounded: a process asked to stop exits within STOP_GRACE_S whatever Redis or OV do
            async with asyncio.timeout(STOP_GRACE_S):
                await _shut_down(svc, name)
        except TimeoutError:
            log.warning("RPC shutdown: not done within %.0fs (Redis or OV not answering); exiting", STOP_GRACE_S)
        finally:  # closed even when the shutdown is cancelled midway
            ov_closed = True
            if own_redis:
                await redis_client.aclose()
            if own_commit_redis:
                commit_client.close()

    app = RpcApp(
        title="ovstream",
        version=installed_version(),
        lifespan=lifespan,
        description="OpenViking context engine for OpenClaw: assemble, compact and tools.",
    )
    app.state.services = svc
    svc.metrics.watch_breaker(lambda: not svc.ov_breaker.allows())
    assemble_call = AssembleCall(svc)
    app.serve_assemble(settings, svc.metrics, assemble_call, plugins)  # ahead of FastAPI, same checks as below
    app.add_middleware(BodyLimit, settings=settings)
    app.add_middleware(PluginGate, seen=plugins)  # a caller with a valid token only
    app.add_middleware(RequireToken, settings=settings, metrics=svc.metrics)  # outermost: before the body
    install_error_handlers(app, settings)

    @app.post(
        "/v1/assemble",
        response_model=None,
        tags=["context"],
        responses={200: {"model": AssembleResponse}, **ERROR_ANSWERS},
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": assemble_request_schema()}}}
        },
    )
    async def assemble_route(request: Request) -> Response:
        """Messages for the next LLM call: auto-recall on the transform-context
        call, the session's OV context on the main call; passthrough otherwise.
        (Served by workers.rpc.assemble_http ahead of FastAPI, with the same call.)"""
        return await assemble_call(await request.body(), request.scope)

    @app.post(
        "/v1/compact",
        response_model=None,
        tags=["context"],
        responses={200: {"model": CompactResponse}, **ERROR_ANSWERS},
    )
    async def compact_route(body: CompactRequest, request: Request) -> Response:
        """Commit the session now (archive + memory extraction) and wait for it."""
        return json_response(await compact(svc, body, caller_of(svc, request.scope, body)))

    @app.post(
        "/v1/subagents/prepare",
        response_model=None,
        tags=["subagents"],
        responses={200: {"model": SubagentAnswer}, **ERROR_ANSWERS},
    )
    async def subagent_prepare(body: SubagentSpawn, request: Request) -> Response:
        """``prepareSubagentSpawn``: record a child's parent and context mode (a fork: the
        parent's snapshot, the start of the child's context)."""
        parent = caller_of(svc, request.scope, Identity(body.parentSessionId, body.parentSessionKey))
        child = caller_of(svc, request.scope, Identity(body.childSessionId, body.childSessionKey))
        return json_response(await prepare_spawn(svc, body, parent, child))

    @app.post(
        "/v1/subagents/rollback",
        response_model=None,
        tags=["subagents"],
        responses={200: {"model": SubagentAnswer}, **ERROR_ANSWERS},
    )
    async def subagent_rollback(body: SubagentRef, request: Request) -> Response:
        """A spawn that failed after it was prepared: forget it."""
        child = caller_of(svc, request.scope, Identity(body.childSessionId, body.childSessionKey))
        return json_response(await roll_back_spawn(svc, child))

    @app.post(
        "/v1/subagents/ended",
        response_model=None,
        tags=["subagents"],
        responses={200: {"model": SubagentAnswer}, **ERROR_ANSWERS},
    )
    async def subagent_ended(body: SubagentEnded, request: Request) -> Response:
        """``onSubagentEnded``: note how the child's run ended (its commit goes on the stream,
        behind its turns, from the plugin)."""
        child = caller_of(svc, request.scope, Identity(body.childSessionId, body.childSessionKey))
        return json_response(await spawn_ended(svc, body, child))

    @app.post(
        "/v1/import/outcomes",
        response_model=None,
        tags=["context"],
        responses={200: {"model": ImportOutcomesResponse}, **ERROR_ANSWERS},
    )
    async def import_outcomes_route(body: ImportOutcomesRequest, request: Request) -> Response:
        """What capture did with one run's imports (``openclaw ovstream import``): written,
        partly there already, already there, or pending (not applied yet)."""
        return json_response(await import_outcomes(svc, body, request.scope))

    @app.post(
        "/v1/erase", response_model=None, tags=["privacy"], responses={200: {"model": EraseReceipt}, **ERROR_ANSWERS}
    )
    async def erase(body: EraseRequest, request: Request) -> Response:
        """Erase the caller's own tenant (or one agent or session of it) from OV and Redis, and
        answer the receipt (docs/PRIVACY.md); ``dryRun`` counts what would go."""
        return json_response(await erase_route(svc, body, request.scope))

    @app.get("/v1/tools", tags=["tools"])
    async def list_tools() -> dict[str, Any]:
        """Every tool with its description and the JSON schema of its params."""
        return {
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.params.model_json_schema()}
                for t in tools().values()
            ]
        }

    @app.post(
        "/v1/tools/{name}",
        response_model=None,
        tags=["tools"],
        responses={
            200: {"model": ToolResponse},
            404: {"model": ErrorResponse, "description": "No such tool"},
            **ERROR_ANSWERS,
        },
    )
    async def tool_route(name: str, body: ToolRequest, request: Request) -> Response:
        """Run one agent tool; ``params`` are the tool's own (see GET /v1/tools)."""
        caller = caller_of(svc, request.scope, body, session_required=False)
        return json_response(await run_tool(svc, caller, name, body.params))

    @app.get(
        "/healthz",
        response_model=None,
        tags=["ops"],
        responses={200: {"model": HealthResponse}, 503: {"model": HealthResponse}},
    )
    async def healthz() -> Response:
        """ok; degraded when OV is unreachable (assemble passes through); down (503) without Redis."""
        redis_state, ov_state = await asyncio.gather(_redis_health(svc), _ov_health(svc))
        if redis_state != "ok":
            status, code = "down", 503
        else:
            status, code = ("ok" if ov_state == "ok" else "degraded"), 200
        return json_response({"status": status, "redis": redis_state, "ov": ov_state}, code)

    @app.get("/v1/status", tags=["ops"])
    async def deployment_status() -> dict[str, Any]:
        """The deployment as ``ovstream status --json`` shows it: every shard's backlog and
        owner, every process's liveness (``stale``: not heard of for a few seconds)."""
        status = await asyncio.to_thread(read_status, svc.commit_redis, settings)
        return status.as_json()

    @app.get("/v1/scaling", tags=["ops"])
    async def scaling() -> dict[str, Any]:
        """What an autoscaler reads (KEDA's metrics-api trigger, deploy/k8s/keda.yaml):
        ``capture.replicas``, the capture processes the backlog asks for, at most one per
        stream read now (it follows ``ovstream reshard``), and the figures behind it."""
        return await asyncio.to_thread(read_scaling, svc.commit_redis, settings)

    @app.get("/v1/usage", response_model=None, tags=["ops"], responses={200: {"model": UsageAnswer}, **ERROR_ANSWERS})
    async def usage(
        request: Request,
        period: Literal["hour", "day"] = Query("day", description="Buckets of an hour or of a day (UTC)."),
        buckets: int = Query(7, ge=1, le=USAGE_BUCKETS_MAX, description="The last N buckets, the current one last."),
        tenant: str | None = Query(None, min_length=1, max_length=200, description="Only this tenant ('-': own)."),
    ) -> Response:
        """What each tenant the caller sees cost (turns, tokens, assembles, commits, OV
        requests, ...): per hour or day, and the sum (core.usage)."""
        return json_response(await usage_route(svc, request.scope, period, buckets, tenant))

    install_console(app, svc)

    @app.get("/metrics", response_model=None, response_class=PlainTextResponse, tags=["ops"])
    async def metrics() -> Response:
        """Prometheus text format."""
        return Response(await asyncio.to_thread(svc.metrics.render), media_type=CONTENT_TYPE)

    return app


async def _sample_lag(svc: Services) -> None:
    """Every shard's backlog, once per ``LAG_SAMPLE_INTERVAL_S`` across the RPC processes:
    the console's lag chart (workers.status.sample_lag)."""
    while True:
        try:
            await asyncio.to_thread(sample_lag, svc.commit_redis, svc.settings)
        except REDIS_ERRORS as exc:
            log.debug("lag not sampled: %s", exc)
        except Exception:  # a chart's sample is never worth the sampler: say why, go on
            log.exception("lag not sampled")
        await asyncio.sleep(LAG_SAMPLE_INTERVAL_S)


RPC_BEAT_S = 2.0
"""How often an RPC process says it is alive (``ovstream status``, the console's processes)."""


async def _beat(svc: Services, name: str, plugins: SeenPlugins) -> None:
    """The process's health record, every ``RPC_BEAT_S`` from its event loop (a loop that
    stalls goes stale there too), with the plugin versions that called it lately."""
    while True:
        facts = {"ov": "ok" if svc.ov_breaker.allows() else "unreachable", "plugins": ",".join(plugins.recent())}
        try:
            await asyncio.to_thread(_write_health, svc, record_health, "rpc", name, **facts)
            await asyncio.to_thread(flush, svc.commit_redis, svc.settings)  # its calls' usage (workers.store.usage)
        except REDIS_ERRORS as exc:
            log.debug("health (or usage) not recorded: %s", exc)
        await asyncio.sleep(RPC_BEAT_S)


async def _shut_down(svc: Services, name: str) -> None:
    """Stop the snapshot-version watch, close the OV pool, remove the health record."""
    await svc.versions.stop()
    await svc.ov.aclose()
    with contextlib.suppress(*REDIS_ERRORS, TimeoutError):  # a stopping process waits on no Redis
        async with asyncio.timeout(RPC_BEAT_S):
            await asyncio.to_thread(_write_health, svc, forget_health, name)
        async with asyncio.timeout(RPC_BEAT_S):
            await asyncio.to_thread(flush, svc.commit_redis, svc.settings)


def _write_health(svc: Services, write: Any, *args: Any, **facts: str) -> None:
    """Write (``record_health``) or remove (``forget_health``) the health record, on the sync
    client in a thread, as the lag sampler does: the app's asyncio client belongs to the loop
    that made it."""
    with svc.commit_redis.pipeline(transaction=False) as pipe:
        write(pipe, svc.settings, *args, **facts)
        pipe.execute()


async def _redis_health(svc: Services) -> str:
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            await svc.redis.ping()
        return "ok"
    except TimeoutError:
        return "unreachable: no answer"
    except REDIS_ERRORS as exc:
        return f"unreachable: {exc}"


async def _ov_health(svc: Services) -> str:
    return await svc.ov.reachability(HEALTH_TIMEOUT_S)
