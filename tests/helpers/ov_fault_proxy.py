"""A reverse proxy in front of a real openviking-server that can make it answer HTTP 500 to
every session write: the fault of an OV whose storage or model backend fails while its
HTTP server is up, which a real OV cannot be told to do. Everything else is forwarded as is."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.helpers.served import served

SERVER_ERROR = {"status": "error", "result": None, "error": {"code": "INTERNAL", "message": "injected failure"}}
"""OV 0.5.2's error envelope for a 500 (the contract's ``{status, result, error}``)."""

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def is_session_write(method: str, path: str) -> bool:
    """``POST /api/v1/sessions/{id}/messages[/batch]``: what capture writes a turn with."""
    return method == "POST" and path.startswith("/api/v1/sessions/") and "/messages" in path


class OVFaultProxy:
    """An ASGI app forwarding to ``upstream``; while ``failing``, session writes get a 500."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.failing = False
        self.refused = 0
        self.written: list[tuple[float, str]] = []
        """(``time.monotonic()``, OV session id) of every session write OV took."""
        self._client: httpx.AsyncClient | None = None

    def first_writes_after(self, at: float) -> dict[str, float]:
        """OV session id -> seconds from ``at`` to the first write of it OV took after ``at``."""
        first: dict[str, float] = {}
        for when, session in self.written:
            if when >= at and session not in first:
                first[session] = when - at
        return first

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response = await self._answer(request)
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        if self.failing and is_session_write(request.method, request.url.path):
            self.refused += 1
            return JSONResponse(SERVER_ERROR, status_code=500)
        if self._client is None:  # made on the server's own loop
            # idle connections dropped well before OV's server closes them (uvicorn: 5 s idle): a
            # write sent on one it had just closed came back as the proxy's own 500
            limits = httpx.Limits(keepalive_expiry=1.0)
            self._client = httpx.AsyncClient(base_url=self.upstream, timeout=60, trust_env=False, limits=limits)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        answer = await self._client.request(
            request.method, request.url.path, params=request.query_params, headers=headers, content=await request.body()
        )
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS | {"content-encoding"}}
        if answer.status_code < 300 and is_session_write(request.method, request.url.path):
            self.written.append((time.monotonic(), request.url.path.split("/")[4]))
        return Response(answer.content, status_code=answer.status_code, headers=kept)


@contextmanager
def ov_fault_proxy(upstream: str) -> Iterator[tuple[OVFaultProxy, str]]:
    """The proxy served on a loopback port, and its URL, until the block ends."""
    proxy = OVFaultProxy(upstream)
    with served(proxy) as port:
        yield proxy, f"http://127.0.0.1:{port}"
