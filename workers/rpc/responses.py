"""What the RPC answers besides success: the error shape, the exception handlers, and the
body limit that refuses an oversized request before it is read.

Every error answer is ``{"error": {"code", "message", "field"?}}``. Bad input is a
4xx whatever it is (malformed, too deep, too large, a field out of range), answered
as an ordinary response so the server keeps the connection for the next request.
Answers are encoded with msgspec (assemble's hold whole transcripts).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.config import Settings
from workers.rpc.context import RpcError
from workers.rpc.models import ErrorResponse
from workers.store.connection import REDIS_ERRORS, redis_went_away

log = logging.getLogger(__name__)

ERROR_ANSWERS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed request"},
    413: {"model": ErrorResponse, "description": "The body is larger than maxBodyBytes"},
    422: {"model": ErrorResponse, "description": "A field is invalid; error.field names it"},
    429: {
        "model": ErrorResponse,
        "description": "Over the tenant's quota (tenantQuotas); Retry-After says when to try again",
    },
    502: {"model": ErrorResponse, "description": "OpenViking answered with an error"},
    503: {"model": ErrorResponse, "description": "OpenViking or Redis is unreachable"},
}
_encoder = msgspec.json.Encoder()


def encode_body(body: Any) -> bytes:
    """``body`` as JSON bytes (a ``msgspec.Raw`` as it is)."""
    try:
        return _encoder.encode(body)
    except (OverflowError, TypeError, msgspec.EncodeError):
        # Integers beyond 64 bits, which a caller's messages may carry: json copes.
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def json_response(body: Any, status: int = 200) -> Response:
    # An encoded body is sent as it is, not copied (a cached assemble answer is ~150 KB).
    content = memoryview(body) if isinstance(body, msgspec.Raw) else encode_body(body)
    return Response(content=content, status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str, field: str | None = None) -> Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if field:
        error["field"] = field
    return json_response({"error": error}, status)


def _field_of(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def install_error_handlers(app: FastAPI, settings: Settings) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
        if first.get("type") == "json_invalid":
            return error_response(400, "invalid_json", f"the body is not valid JSON: {first.get('msg')}")
        field = _field_of(first.get("loc", ()))
        if field == "body":
            return error_response(400, "invalid_body", "the body must be a JSON object")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return error_response(422, "invalid_request", f"{field}: {first.get('msg')}{more}", field)

    async def _answer(request: Request, exc: Exception) -> Response:
        return error_answer(settings, exc, request.method, request.url.path)

    # Registered for the classes themselves (not only as a catch-all), so Starlette answers them
    # as ordinary responses and the connection stays open: a catch-all handler's answer is
    # followed by a re-raise, and the server then closes the keep-alive connection.
    for answered in (RpcError, StarletteHTTPException, RecursionError, *REDIS_ERRORS, Exception):
        app.add_exception_handler(answered, _answer)


def error_answer(settings: Settings, exc: BaseException, method: str, path: str) -> Response:
    """The answer to a request that raised ``exc``: its 4xx, 503 when Redis is away, else a
    500 that carries no trace (the log has it)."""
    if isinstance(exc, RpcError):
        response = error_response(exc.status, exc.code, exc.message, exc.field)
        retry_after = getattr(exc, "retry_after_s", None)  # a quota's 429 (workers.rpc.quotas)
        if retry_after is not None:
            response.headers["Retry-After"] = str(retry_after)
        return response
    if isinstance(exc, BodyTooLarge):
        return too_large(settings)
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):  # FastAPI's own body parse
            return too_deep()
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))
    if isinstance(exc, RecursionError):
        return too_deep()
    if redis_went_away(exc):  # leaked ones too (redis-py #4287); a refused command is a bug, below
        log.warning("%s %s: Redis unreachable: %s", method, path, exc)
        return error_response(503, "redis_unavailable", f"Redis is unreachable: {exc}")
    log.error("unhandled error on %s %s", method, path, exc_info=exc)
    return error_response(500, "internal", "internal error; the server log has the details")


def too_large(settings: Settings) -> Response:
    message = f"the request body is larger than maxBodyBytes={settings.max_body_bytes} bytes"
    return error_response(413, "body_too_large", message)


class BodyTooLarge(StarletteHTTPException):
    """A chunked body that passed ``maxBodyBytes`` while it was read (answered 413)."""

    def __init__(self) -> None:
        super().__init__(413, "body too large")


class BodyLimit:
    """413 for a body over ``maxBodyBytes``, before it is parsed.

    A declared Content-Length over the limit is answered before a byte of the body
    is read; a chunked body is counted as it arrives and refused once it passes the
    limit. Both answers are ordinary responses, so the server keeps the connection
    (it discards the rest of the body and reads the next request). Not FastAPI's
    ``max_body_size``: that one answers a declared length in plain text.
    """

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        limit = self.settings.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await too_large(self.settings)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge  # through the route (FastAPI re-raises HTTP errors) to _http_error
            return message

        await self.app(scope, counted, send)


def too_deep() -> Response:
    """Absurdly nested JSON from the caller: too deep to decode, convert or encode."""
    return error_response(400, "too_deep", "the body is nested too deeply")
