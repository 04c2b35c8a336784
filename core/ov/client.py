"""Async client of the OpenViking 0.5.2 HTTP API.

All IO goes through one pooled ``httpx.AsyncClient``; pass ``transport=`` (for
example ``workers.dev.fake_ov.app.FakeOV().transport()`` or an ``httpx.MockTransport``) to
run it in memory. ``scoped()`` gives a view with another actor peer or API key
that shares the pool.

Answers are unwrapped from the envelope ``{"status", "result", "error"}``;
an error answer raises ``OVError`` (``OVUnavailable`` when OV is down: no
connection, a timeout, or HTTP 502/503/504; see core.ov.envelope). Only idempotent calls are retried
(GETs, DELETEs and the read-only POST searches), on 5xx and connection errors,
with exponential backoff. Writes are never retried: a retried add or commit
could apply twice.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

from core.backoff import Backoff
from core.config import Settings
from core.ov.content_calls import ContentCalls, segment
from core.ov.envelope import OVError, OVRefused, OVUnavailable, decode_result, is_passing, object_result, unwrap
from core.ov.layout import BATCH_LIMIT
from core.ov.messages import OVMessage, known_parts, to_json
from core.ov.models import (
    AddMessagesResult,
    Archive,
    CommitAccepted,
    SessionContext,
    SessionState,
    TaskState,
    to_struct,
)

KEY_PROBE_SESSION = "ovstream-key-probe"
"""The session ``key_check`` reads (never created: a read does not create it)."""

__all__ = ["OVClient", "OVError", "OVRefused", "OVUnavailable"]

log = logging.getLogger(__name__)

_DEFAULT = Settings.model_fields
"""The client's defaults are the settings' (``core.config``)."""


class OVClient(ContentCalls):
    """One OV identity (API key or dev-mode account/user, plus an optional actor peer)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        account: str = _DEFAULT["account"].default,
        user: str = _DEFAULT["user"].default,
        timeout: float = _DEFAULT["ov_timeout_s"].default,
        write_timeout: float = _DEFAULT["ov_write_timeout_s"].default,
        retries: int = _DEFAULT["ov_retries"].default,
        backoff: float = _DEFAULT["ov_backoff_s"].default,
        transport: httpx.AsyncBaseTransport | None = None,
        peer: str | None = None,
        batch_max: int = BATCH_LIMIT,
        ca_file: str | None = None,
        on_request: Callable[[str | None], None] | None = None,
        _http: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.account = account
        self.user = user
        self.peer = peer
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.retries = retries
        self.backoff = backoff
        self.batch_max = batch_max
        self.on_request = on_request
        """Told the API key of every request sent (each try): the tenants' usage (shared by
        ``scoped`` views)."""
        self.probe_key: str | None = api_key
        """The key ``key_check`` asks with when this client has none (``from_settings``)."""
        self._owns_http = _http is None
        self._http = _http or httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=httpx.Timeout(timeout),
            trust_env=False,  # OV is usually on loopback: never route it through an HTTP(S)_PROXY
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            # an https OV: verified against ca_file (a private CA), else the system's CAs
            verify=ssl.create_default_context(cafile=ca_file) if ca_file else True,
        )
        self.headers = self._identity_headers()

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        transport: httpx.AsyncBaseTransport | None = None,
        on_request: Callable[[str | None], None] | None = None,
    ) -> OVClient:
        client = cls(
            settings.base_url,
            api_key=settings.api_key,
            account=settings.account,
            user=settings.user,
            timeout=settings.ov_timeout_s,
            write_timeout=settings.ov_write_timeout_s,
            retries=settings.ov_retries,
            backoff=settings.ov_backoff_s,
            batch_max=settings.ov_batch_max,
            transport=transport,
            ca_file=settings.ov_ca_file,
            on_request=on_request,
        )
        # with per-tenant keys alone (no apiKey) the key check asks as one of the tenants
        client.probe_key = settings.api_key or next(iter(settings.user_api_keys.values()), None)
        return client

    def scoped(self, *, peer: str | None = None, api_key: str | None = None) -> OVClient:
        """The same pool with another actor peer and/or API key (None keeps this client's)."""
        return OVClient(
            self.base_url,
            api_key=api_key or self.api_key,
            account=self.account,
            user=self.user,
            timeout=self.timeout,
            write_timeout=self.write_timeout,
            retries=self.retries,
            backoff=self.backoff,
            peer=peer or self.peer,
            batch_max=self.batch_max,
            on_request=self.on_request,
            _http=self._http,
        )

    def _identity_headers(self) -> dict[str, str]:
        if self.api_key:
            headers = {"X-API-Key": self.api_key}
        else:
            headers = {"X-OpenViking-Account": self.account, "X-OpenViking-User": self.user}
        if self.peer:
            headers["X-OpenViking-Actor-Peer"] = self.peer
        return headers

    async def aclose(self) -> None:
        """Close the pool (a no-op on a scoped view; close the client it came from)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> OVClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the one IO seam --------------------------------------------------------------

    async def _call(self, method: str, path: str, *, idempotent: bool, raw: bool = False, **kwargs: Any) -> Any:
        attempts = 1 + (max(0, self.retries) if idempotent else 0)
        for attempt in range(attempts):
            try:
                return await self._once(method, path, raw=raw, **kwargs)
            except OVError as err:
                # a refused key stays refused: no retry (the caller waits it out as OV away)
                retryable = is_passing(err) and not isinstance(err, OVRefused)
                if not retryable or attempt == attempts - 1:
                    raise
                delay = Backoff(self.backoff).delay(attempt + 1)
                log.debug(
                    "OV %s %s retry %d/%d in %.2fs after %s", method, path, attempt + 1, attempts - 1, delay, err.code
                )
                if delay > 0:
                    await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _once(self, method: str, path: str, *, raw: bool, **kwargs: Any) -> Any:
        started = time.perf_counter()
        if self.on_request is not None:
            self.on_request(self.api_key)
        try:
            resp = await self._http.request(method, path, headers=self.headers, **kwargs)
        except httpx.TimeoutException as exc:
            log.debug("OV %s %s -> timeout after %.1f ms", method, path, _ms(started))
            raise OVUnavailable("UNAVAILABLE", f"timeout: {exc!r}") from exc
        except httpx.TransportError as exc:
            log.debug("OV %s %s -> %s after %.1f ms", method, path, type(exc).__name__, _ms(started))
            raise OVUnavailable("UNAVAILABLE", f"{type(exc).__name__}: {exc}") from exc
        log.debug("OV %s %s -> %d in %.1f ms", method, path, resp.status_code, _ms(started))
        return unwrap(resp, raw=raw)

    async def _get(self, path: str, **kwargs: Any) -> Any:
        return await self._call("GET", path, idempotent=True, **kwargs)

    async def _post(
        self, path: str, body: dict[str, Any] | None = None, *, idempotent: bool = False, **kwargs: Any
    ) -> Any:
        return await self._call("POST", path, idempotent=idempotent, json=body, **kwargs)

    # --- system and sessions ----------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``{"status": "ok", "healthy": true, "version": ...}`` (not enveloped by the server)."""
        return object_result(await self._get("/health", raw=True))

    async def reachability(self, timeout_s: float) -> str:
        """``ok``, or why not (``unreachable: ...``, ``unhealthy: ...``): a probe that never
        raises, for /healthz and for capture's watch on OV between turns."""
        try:
            async with asyncio.timeout(timeout_s):
                answer = await self.health()
        except TimeoutError:
            return "unreachable: no answer"
        except Exception as exc:  # any failure here is just "not healthy", never a failed probe
            return f"unreachable: {exc}"
        if answer.get("status") != "ok":
            return f"unhealthy: {answer!r}"
        return await self.key_check(timeout_s)

    async def key_check(self, timeout_s: float) -> str:
        """``ok``, or ``refuses key: ...`` when OV answers an authenticated call with 401: its
        ``/health`` is open to anyone, so a wrong or missing API key shows only here (a read of
        a session that does not exist: NOT_FOUND means the key was accepted)."""
        asking = self if self.api_key or not self.probe_key else self.scoped(api_key=self.probe_key)
        try:
            async with asyncio.timeout(timeout_s):
                await asking.get_session(KEY_PROBE_SESSION)
        except OVRefused as exc:
            return f"refuses key: {exc}"
        except Exception:  # NOT_FOUND (accepted), or anything else: the key is not the problem
            return "ok"
        return "ok"

    async def create_session(self, session_id: str | None = None) -> dict[str, Any]:
        body = {"session_id": session_id} if session_id else {}
        return object_result(await self._post("/api/v1/sessions", body))

    async def get_session(self, session_id: str, *, auto_create: bool = False) -> SessionState:
        params = {"auto_create": "true"} if auto_create else None
        result = await self._get(f"/api/v1/sessions/{segment(session_id)}", params=params)
        return decode_result(result, SessionState)

    async def add_message(self, session_id: str, message: OVMessage) -> AddMessagesResult:
        result = await self._post(f"/api/v1/sessions/{segment(session_id)}/messages", to_json([message])[0])
        out = decode_result(result, AddMessagesResult)
        out.added = 1
        return out

    async def add_messages(self, session_id: str, messages: list[OVMessage]) -> AddMessagesResult:
        """Batch add in chunks of at most ``batch_max``; the last answer with ``added`` summed.

        Not retried. If a chunk fails, the error's ``added`` counts what earlier chunks stored.
        Each chunk waits ``write_timeout`` for its answer (connecting: ``timeout``): a write
        given up on may still be applied later, so a slow OV is waited for, not raced.
        """
        timeout = httpx.Timeout(self.write_timeout, connect=self.timeout)
        path = f"/api/v1/sessions/{segment(session_id)}/messages/batch"
        size = max(1, min(self.batch_max, BATCH_LIMIT))
        bodies = to_json(messages)
        chunks = [bodies[i : i + size] for i in range(0, len(bodies), size)] or [[]]
        added = 0
        last = AddMessagesResult(session_id=session_id)
        for chunk in chunks:
            try:
                last = decode_result(await self._post(path, {"messages": chunk}, timeout=timeout), AddMessagesResult)
            except OVError as err:
                err.added = added
                raise
            added += last.added
        last.added = added
        return last

    async def commit(
        self, session_id: str, *, keep_recent_count: int | None = None, enable_working_memory: bool | None = None
    ) -> CommitAccepted:
        body: dict[str, Any] = {}
        if keep_recent_count is not None:
            body["keep_recent_count"] = keep_recent_count
        if enable_working_memory is not None:
            body["enable_working_memory"] = enable_working_memory
        result = await self._post(f"/api/v1/sessions/{segment(session_id)}/commit", body)
        return decode_result(result, CommitAccepted)

    async def get_task(self, task_id: str) -> TaskState:
        return decode_result(await self._get(f"/api/v1/tasks/{segment(task_id)}"), TaskState)

    async def session_commit_tasks(self, session_id: str, *, limit: int = 20) -> list[TaskState]:
        """The session's commit tasks OV still knows (``GET /api/v1/tasks``), newest first."""
        params = {"task_type": "session_commit", "resource_id": session_id, "limit": str(limit)}
        result = await self._get("/api/v1/tasks", params=params)
        tasks = [to_struct(item, TaskState) for item in result or [] if isinstance(item, dict)]
        return sorted(tasks, key=lambda t: t.created_at or 0.0, reverse=True)

    async def get_context(self, session_id: str, *, token_budget: int) -> SessionContext:
        result = await self._get(
            f"/api/v1/sessions/{segment(session_id)}/context", params={"token_budget": str(token_budget)}
        )
        return decode_result(_known_parts(result), SessionContext)

    async def get_archive(self, session_id: str, archive_id: str) -> Archive:
        result = await self._get(f"/api/v1/sessions/{segment(session_id)}/archives/{segment(archive_id)}")
        return decode_result(_known_parts(result), Archive)

    async def delete_session(self, session_id: str) -> dict[str, Any]:
        return object_result(await self._call("DELETE", f"/api/v1/sessions/{segment(session_id)}", idempotent=True))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _known_parts(result: Any) -> Any:
    """An answer holding ``messages`` with each part of a kind ovstream does not know kept
    as an ``OtherPart`` (core.ov.messages.known_parts), not failing the whole answer."""
    if isinstance(result, dict) and "messages" in result:
        return {**result, "messages": known_parts(result["messages"])}
    return result
