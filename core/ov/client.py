"""Async client of the OpenViking 0.5.2 HTTP API (capture, the RPC, repairs; the commit
jobs' threads use its sync twin, core.ov.sync_client).

All IO goes through one pooled httpx transport (``httpx.AsyncHTTPTransport``); pass
``transport=`` (for example ``workers.dev.fake_ov.app.FakeOV().transport()`` or an
``httpx.MockTransport``) to run it in memory. ``scoped()`` gives a view with another actor
peer or API key that shares the pool. Who asks and how a call goes on the wire:
core.ov.endpoint; what the calls are: core.ov.calls.

Answers are unwrapped from the envelope ``{"status", "result", "error"}``;
an error answer raises ``OVError`` (``OVUnavailable`` when OV is down: no
connection, a timeout, or HTTP 502/503/504; see core.ov.envelope). Only idempotent calls are retried
(GETs, DELETEs and the read-only POST searches), on 5xx and connection errors,
with exponential backoff. Writes are never retried: a retried add or commit
could apply twice.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx

from core.ov import calls
from core.ov.calls import Call, segment, with_known_parts
from core.ov.content_calls import ContentCalls
from core.ov.endpoint import POOL_LIMITS, OVEndpoint, now, tls_context
from core.ov.envelope import OVError, OVRefused, OVUnavailable, decode_result, object_result
from core.ov.layout import BATCH_LIMIT
from core.ov.messages import OVMessage, to_json
from core.ov.models import AddMessagesResult, Archive, CommitAccepted, SessionContext, SessionState, TaskState

T = TypeVar("T")
KEY_PROBE_SESSION = "ovstream-key-probe"
"""The session ``key_check`` reads (never created: a read does not create it)."""

__all__ = ["OVClient", "OVError", "OVRefused", "OVUnavailable"]


class OVClient(ContentCalls, OVEndpoint):
    """One OV identity (API key or dev-mode account/user, plus an optional actor peer), async."""

    _transport: httpx.AsyncBaseTransport

    def _new_transport(self, ca_file: str | None) -> httpx.AsyncBaseTransport:
        return httpx.AsyncHTTPTransport(verify=tls_context(ca_file), limits=POOL_LIMITS)

    async def aclose(self) -> None:
        """Close the pool (a no-op on a scoped view; close the client it came from)."""
        if self._owns_transport:
            await self._transport.aclose()

    async def __aenter__(self) -> OVClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the one IO seam --------------------------------------------------------------

    async def send(self, call: Call[T]) -> T:
        """Send ``call`` (again, as its kind allows: core.ov.endpoint) and decode its answer."""
        tries = self._tries(call)
        for attempt in range(tries):
            try:
                return call.decode(await self._once(call))
            except OVError as err:
                delay = self._wait_before_next(call, err, attempt, tries)
                if delay is None:
                    raise
                if delay > 0:
                    await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _once(self, call: Call[Any]) -> Any:
        started = now()
        try:
            resp = await self._transport.handle_async_request(self._request(call))
            try:
                await resp.aread()
            finally:
                await resp.aclose()
        except httpx.TransportError as exc:
            raise self._unreachable(call, exc, started) from exc
        return self._answer(call, resp, started)

    async def _call(self, method: str, path: str, *, idempotent: bool, raw: bool = False, **kwargs: Any) -> Any:
        return await self.send(Call(method, path, idempotent=idempotent, raw=raw, options=kwargs))

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
        return await self.send(calls.get_session(session_id, auto_create=auto_create))

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
        return await self.send(
            calls.commit(session_id, keep_recent_count=keep_recent_count, enable_working_memory=enable_working_memory)
        )

    async def get_task(self, task_id: str) -> TaskState:
        return await self.send(calls.get_task(task_id))

    async def session_commit_tasks(self, session_id: str, *, limit: int = 20) -> list[TaskState]:
        """The session's commit tasks OV still knows (``GET /api/v1/tasks``), newest first."""
        return await self.send(calls.session_commit_tasks(session_id, limit=limit))

    async def get_context(self, session_id: str, *, token_budget: int) -> SessionContext:
        return await self.send(calls.get_context(session_id, token_budget=token_budget))

    async def get_archive(self, session_id: str, archive_id: str) -> Archive:
        result = await self._get(f"/api/v1/sessions/{segment(session_id)}/archives/{segment(archive_id)}")
        return decode_result(with_known_parts(result), Archive)

    async def delete_session(self, session_id: str) -> dict[str, Any]:
        return object_result(await self._call("DELETE", f"/api/v1/sessions/{segment(session_id)}", idempotent=True))
