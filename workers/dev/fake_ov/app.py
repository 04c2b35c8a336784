"""In-memory, stateful fake of the OpenViking 0.5.2 HTTP API.

``FakeOV().transport()`` is an ``httpx.MockTransport`` (for the async OV client, and for
the sync one from a thread with no running event loop); ``FakeOV().asgi_app()`` serves the same over
real HTTP. Envelope, status codes and error codes are 0.5.2's
(``{"status": "ok"|"error", "result", "error": {code, message, details}}``);
``GET /health`` is unwrapped, as in 0.5.2.

State is per (account, user): ``fake.sessions`` is the default tenant's
``{session_id: FakeSession}`` (``.messages`` are stored message dicts);
``fake.tenant(account, user)`` reaches others. Stored memories, resources and
skills live per account in ``fake.entries[account][uri]``.

Knobs:
- ``phase2``: "complete" | "fail" | "hang" — how the phase-2 task of the *next*
  commits ends (fixed at commit time).
- ``phase2_reads_until_done`` (alias ``phase2_steps``): task reads answering
  "running" before the final status; ``run_phase2()`` finishes every open task now.
- ``fail_next(n, status=503, code="UNAVAILABLE", route=None, after=False, message=None)``:
  the next n calls (optionally only those whose route name or "METHOD /path" contains
  ``route``) answer with that error (``after``: carried out first).
- ``down = True``: every call raises ``httpx.ConnectError``.
- ``latency_s``: a float for every route or ``{route_name: seconds}`` (seconds may be a
  ``(low, high)`` range, drawn per call); the answer waits that long, then the call takes
  effect (``asyncio.sleep`` on an event loop, ``time.sleep`` on a sync client's thread).
- ``calls``: ``[(method, path)]`` of every request; ``requests``: the httpx requests.
- ``api_keys={key: (account, user)}`` and/or ``root_key``: API-key mode (401 on a
  missing/unknown key, 403 for the root key on data routes); otherwise dev mode
  with ``X-OpenViking-Account`` / ``X-OpenViking-User`` (default "default").
- ``seed_memory(...)``, ``seed_resource(...)``, ``memories(...)`` for recall tests.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import httpx

from workers.dev.fake_ov.sessions import SessionRoutes
from workers.dev.fake_ov.state import Ctx, FakeError, FakeSession, FakeTask, Req, Tenant

__all__ = ["FakeError", "FakeOV", "FakeSession", "FakeTask", "Tenant"]

VERSION = "0.5.2"


Route = tuple[str, "re.Pattern[str]", str, str]
"""(method, path regex, handler name, auth level)."""


def _route(method: str, pattern: str, name: str, auth: str = "data") -> Route:
    regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")
    return method, regex, name, auth


ROUTES = [
    _route("GET", "/health", "health", auth="none"),
    _route("GET", "/_stats", "stats", auth="none"),
    _route("POST", "/api/v1/sessions", "create_session"),
    _route("GET", "/api/v1/sessions", "list_sessions"),
    _route("GET", "/api/v1/sessions/{sid}", "get_session"),
    _route("DELETE", "/api/v1/sessions/{sid}", "delete_session"),
    _route("POST", "/api/v1/sessions/{sid}/messages", "add_message"),
    _route("POST", "/api/v1/sessions/{sid}/messages/batch", "add_messages"),
    _route("POST", "/api/v1/sessions/{sid}/commit", "commit"),
    _route("GET", "/api/v1/sessions/{sid}/context", "get_context"),
    _route("GET", "/api/v1/sessions/{sid}/archives/{aid}", "get_archive"),
    _route("GET", "/api/v1/tasks/{tid}", "get_task"),
    _route("GET", "/api/v1/tasks", "list_tasks"),
    _route("POST", "/api/v1/search/find", "find"),
    _route("POST", "/api/v1/search/grep", "grep"),
    _route("GET", "/api/v1/content/read", "read"),
    _route("GET", "/api/v1/content/abstract", "abstract"),
    _route("GET", "/api/v1/content/overview", "overview"),
    _route("DELETE", "/api/v1/fs", "rm"),
    _route("POST", "/api/v1/resources/temp_upload", "temp_upload"),
    _route("POST", "/api/v1/resources", "add_resource"),
    _route("POST", "/api/v1/skills", "add_skill"),
    _route("POST", "/api/v1/admin/accounts", "admin_create_account", auth="admin"),
    _route("POST", "/api/v1/admin/accounts/{acct}/users", "admin_create_user", auth="admin"),
]


class FakeOV(SessionRoutes):
    """The fake server. One request is answered at a time (its state is not otherwise
    thread-safe): async clients on event loops and sync ones on threads may share it."""

    # --- knobs ------------------------------------------------------------------------

    @property
    def phase2_steps(self) -> int:
        return self.phase2_reads_until_done

    @phase2_steps.setter
    def phase2_steps(self, value: int) -> None:
        self.phase2_reads_until_done = value

    def fail_next(
        self,
        n: int = 1,
        status: int = 503,
        code: str = "UNAVAILABLE",
        route: str | None = None,
        *,
        after: bool = False,
        message: str | None = None,
    ) -> None:
        """``after``: each call is carried out, then answered with the failure (OV took it and
        its answer was an error: a commit OV archived, then answered 500)."""
        self._failures += [(status, code, route, after, message or f"injected failure ({code})")] * n

    @property
    def sessions(self) -> dict[str, FakeSession]:
        return self.tenant().sessions

    @property
    def tasks(self) -> dict[str, FakeTask]:
        return self.tenant().tasks

    # --- transport --------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> Any:
        """MockTransport handler: a Response, or a coroutine when latency is set."""
        path = request.url.raw_path.decode("ascii").split("?", 1)[0]
        self.calls.append((request.method, unquote(path)))
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("fake OV is down", request=request)
        match = self._match(request.method, path)
        delay = self._latency(match[0][2] if match else "")
        if delay > 0 and _on_a_loop():

            async def slow() -> httpx.Response:
                await asyncio.sleep(delay)
                return self._respond_alone(request, path, match)

            return slow()
        if delay > 0:  # a sync client's thread (core.ov.sync_client)
            time.sleep(delay)
        return self._respond_alone(request, path, match)

    def _respond_alone(self, request: httpx.Request, path: str, match: Any) -> httpx.Response:
        """One answer at a time: sync clients ask from threads of their own, beside the loops."""
        with self._answering:
            return self._respond(request, path, match)

    def asgi_app(self) -> Callable[..., Awaitable[None]]:
        """A minimal ASGI app serving this fake (for uvicorn / real HTTP clients)."""

        async def app(
            scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
        ) -> None:
            if scope["type"] != "http":
                return
            body = b""
            while True:
                msg = await receive()
                body += msg.get("body", b"")
                if not msg.get("more_body"):
                    break
            raw = scope.get("raw_path") or scope["path"].encode()
            qs = scope.get("query_string", b"")
            url = httpx.URL(scheme="http", host="fake-ov", raw_path=raw + (b"?" + qs if qs else b""))
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
            request = httpx.Request(scope["method"], url, headers=headers, content=body)
            try:
                response = self.handle(request)
                if not isinstance(response, httpx.Response):
                    response = await response
            except httpx.ConnectError:
                response = httpx.Response(503, json=FakeError("UNAVAILABLE", "fake OV is down").envelope())
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k.encode(), v.encode()) for k, v in response.headers.items()],
                }
            )
            await send({"type": "http.response.body", "body": response.content})

        return app

    def _latency(self, name: str) -> float:
        value = self.latency_s.get(name, 0.0) if isinstance(self.latency_s, dict) else self.latency_s
        if isinstance(value, tuple):  # (low, high): an OV whose answers vary under load
            return random.uniform(*value)
        return float(value or 0.0)

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        for route in ROUTES:
            if route[0] == method and (m := route[1].match(path)):
                return route, {k: unquote(v) for k, v in m.groupdict().items()}
        return None

    def _respond(self, request: httpx.Request, path: str, match: Any) -> httpx.Response:
        name = match[0][2] if match else ""
        for i, (status, code, route, after, message) in enumerate(self._failures):
            if route is None or route in name or route in f"{request.method} {unquote(path)}":
                del self._failures[i]
                if after:
                    self._carry_out(request, path, match)
                return httpx.Response(status, json=FakeError(code, message).envelope())
        return self._carry_out(request, path, match)

    def _carry_out(self, request: httpx.Request, path: str, match: Any) -> httpx.Response:
        name = match[0][2] if match else ""
        try:
            if match is None:
                raise FakeError("NOT_FOUND", f"no route {request.method} {path}")
            route, params = match
            ctx = self._authenticate(request, route[3])
            result = getattr(self, "_r_" + route[2])(Req(request, params, ctx))
        except FakeError as err:
            return httpx.Response(err.status, json=err.envelope())
        if name in ("health", "stats"):
            return httpx.Response(200, json=result)
        return httpx.Response(200, json={"status": "ok", "result": result, "error": None})

    # --- auth -------------------------------------------------------------------------

    def _authenticate(self, request: httpx.Request, auth: str) -> Ctx:
        peer = (request.headers.get("X-OpenViking-Actor-Peer") or "").strip() or None
        if auth == "none":
            return Ctx("default", "default", "root", peer)
        if not self.auth_enabled:  # dev mode
            account = request.headers.get("X-OpenViking-Account") or "default"
            user = request.headers.get("X-OpenViking-User") or "default"
            return Ctx(account, user, "admin", peer)
        key = request.headers.get("X-API-Key")
        if not key and request.headers.get("Authorization", "").startswith("Bearer "):
            key = request.headers["Authorization"][7:]
        if not key:
            raise FakeError("UNAUTHENTICATED", "Missing API Key")
        if self.root_key and key == self.root_key:
            if auth != "admin":
                raise FakeError("PERMISSION_DENIED", "ROOT API key cannot access data APIs; use a user key")
            return Ctx("default", "default", "root", peer)
        if key not in self.api_keys:
            raise FakeError("UNAUTHENTICATED", "Invalid API Key")
        account, user = self.api_keys[key]
        role = "admin" if key in self.admin_keys else "user"
        if auth == "admin" and role != "admin":
            raise FakeError("PERMISSION_DENIED", "admin role required")
        return Ctx(account, user, role, peer)

    # --- system ---------------------------------------------------------------------

    def _r_stats(self, r: Req) -> dict[str, Any]:
        """``GET /_stats`` (the fake's own, not OV's): how many requests it answered (benches)."""
        return {"requests": len(self.requests)}

    def _r_health(self, r: Req) -> dict[str, Any]:
        auth_mode = "api_key" if self.auth_enabled else "dev"
        return {"status": "ok", "healthy": True, "version": VERSION, "auth_mode": auth_mode}


def _on_a_loop() -> bool:
    """Whether this thread runs an event loop (the caller awaits the answer: an async client)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
