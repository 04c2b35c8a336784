"""POST /v1/assemble answered straight from ASGI, ahead of FastAPI's router.

Assemble is the host's hot call (about two per turn, each carrying the whole transcript).
Through FastAPI's routing, request object and endpoint machinery a snapshot hit costs about
140 us more CPU than the answer itself (bench/RESULTS.md, "The RPC against its floor"), so
this middleware, the innermost of the app's own (the token check and the body limit still
run before it), reads the body and answers the route itself; every other request goes on to
FastAPI. The route stays declared there too, for the OpenAPI spec, and both call the same
``AssembleCall``. Errors are answered as the app's exception handlers answer them
(``responses.error_answer``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from core.config import Settings
from workers.rpc.assemble import assemble
from workers.rpc.auth import CREDENTIAL_STATE, ov_key_for
from workers.rpc.context import Caller, Services, api_key_from_headers, resolve_caller
from workers.rpc.models import decode_assemble_request
from workers.rpc.responses import error_answer, json_response

ASSEMBLE_PATH = "/v1/assemble"


def caller_of(settings: Settings, scope: Scope, body: object, *, session_required: bool = True) -> Caller:
    """Who calls, from the body's identity fields, the request's headers and the credential
    the token check found (``scope["state"]``)."""
    sent_key = api_key_from_headers(Headers(scope=scope), bearer=not settings.credentials)
    credential = scope.get("state", {}).get(CREDENTIAL_STATE)
    return resolve_caller(
        settings,
        session_id=getattr(body, "sessionId", None),
        session_key=getattr(body, "sessionKey", None),
        runtime_context=getattr(body, "runtimeContext", None),
        api_key=ov_key_for(credential, sent_key),
        session_required=session_required,
    )


class AssembleCall:
    """One assemble request's answer, from its raw body (both ways in share it)."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc

    async def __call__(self, body: bytes, scope: Scope) -> Response:
        request = decode_assemble_request(body)
        return json_response(await assemble(self.svc, request, caller_of(self.svc.settings, scope, request)))


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


class AssembleEndpoint:
    """ASGI middleware answering ``POST /v1/assemble`` with ``call``; anything else goes to ``app``."""

    def __init__(self, app: ASGIApp, settings: Settings, call: Callable[[bytes, Scope], Awaitable[Response]]) -> None:
        self.app = app
        self.settings = settings
        self.call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != ASSEMBLE_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            response = await self.call(await read_body(receive), scope)
        except ClientGone:
            return
        except Exception as exc:  # every error as the app's handlers answer it (never a trace)
            response = error_answer(self.settings, exc, "POST", ASSEMBLE_PATH)
        await response(scope, receive, send)
