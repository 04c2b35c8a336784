"""POST /v1/assemble answered straight from ASGI, ahead of FastAPI.

Assemble is the host's hot call (about two per turn). Through FastAPI (its per-request
telemetry check, error middleware, router, request object and endpoint machinery) a
snapshot hit costs several times the answer itself (bench/RESULTS.md, "The RPC against
its floor"), so ``RpcApp`` hands this one route to its own lane: the same token check,
plugin version check and body limit as every other route (``RequireToken``, ``PluginGate``,
``BodyLimit``), then ``AssembleCall``.
The route stays declared in FastAPI too, for the OpenAPI spec, and calls the same
``AssembleCall``. Errors are answered as the app's exception handlers answer them
(``responses.error_answer``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from core.config import Settings
from workers.rpc.assemble import assemble
from workers.rpc.auth import CREDENTIAL_STATE, RequireToken, ov_key_for
from workers.rpc.context import Caller, Services, api_key_from_headers
from workers.rpc.metrics import RpcMetrics
from workers.rpc.models import decode_assemble_request
from workers.rpc.plugins import PluginGate, SeenPlugins
from workers.rpc.quotas import spend
from workers.rpc.responses import BodyLimit, error_answer, json_response

ASSEMBLE_PATH = "/v1/assemble"


def caller_of(svc: Services, scope: Scope, body: object, *, session_required: bool = True) -> Caller:
    """Who calls, from the body's identity fields, the request's headers and the credential
    the token check found (``scope["state"]``)."""
    sent_key = api_key_from_headers(Headers(scope=scope), bearer=not svc.settings.credentials)
    credential = scope.get("state", {}).get(CREDENTIAL_STATE)
    return svc.callers.of(body, ov_key_for(credential, sent_key), session_required=session_required)


class AssembleCall:
    """One assemble request's answer, from its raw body (both ways in share it)."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc

    async def __call__(self, body: bytes, scope: Scope) -> Response:
        request = decode_assemble_request(body)
        caller = caller_of(self.svc, scope, request)
        await spend(self.svc, caller, "assembles")
        return json_response(await assemble(self.svc, request, caller))


class ClientGone(Exception):
    """The client went away before its body had arrived."""


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _answered(
    call: Callable[[bytes, Scope], Awaitable[Response]], settings: Settings, scope: Scope, receive: Receive, send: Send
) -> None:
    """Read the body, answer it with ``call``; every error as the app's handlers answer it."""
    try:
        response = await call(await read_body(receive), scope)
    except ClientGone:
        return
    except Exception as exc:  # never a trace to the caller
        response = error_answer(settings, exc, "POST", ASSEMBLE_PATH)
    await response(scope, receive, send)


class RpcApp(FastAPI):
    """FastAPI, but ``POST /v1/assemble`` goes to ``assemble_lane`` once it is set."""

    assemble_lane: ASGIApp | None = None

    def serve_assemble(
        self,
        settings: Settings,
        metrics: RpcMetrics,
        call: Callable[[bytes, Scope], Awaitable[Response]],
        plugins: SeenPlugins,
    ) -> None:
        async def answer(scope: Scope, receive: Receive, send: Send) -> None:
            await _answered(call, settings, scope, receive, send)

        self.assemble_lane = RequireToken(PluginGate(BodyLimit(answer, settings), plugins), settings, metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.assemble_lane
        if (
            lane is not None
            and scope["type"] == "http"
            and scope["path"] == ASSEMBLE_PATH
            and scope["method"] == "POST"
        ):
            await lane(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)
