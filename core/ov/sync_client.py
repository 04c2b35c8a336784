"""Sync client of the OpenViking 0.5.2 HTTP API, for code on threads of its own: the commit
jobs (RQ's thread) and the poller's phase-2 reads (its read threads).

The async client's twin (core.ov.client), with the calls those threads make. Same identity,
same calls (core.ov.calls), same wire and retries (core.ov.endpoint); only the IO differs: an
``httpx.HTTPTransport`` on the caller's thread. A thread that asked the async client went
through an event loop on another thread for each call (a hop there and back) and through
anyio: an OV call cost a worker 0.83 ms of CPU that way, 0.28 ms this way (bench/RESULTS.md).
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

import httpx

from core.ov import calls
from core.ov.calls import Call
from core.ov.endpoint import POOL_LIMITS, OVEndpoint, now, tls_context
from core.ov.envelope import OVError
from core.ov.models import CommitAccepted, SessionContext, SessionState, TaskState

T = TypeVar("T")


class OVSyncClient(OVEndpoint):
    """One OV identity (API key or dev-mode account/user, plus an optional actor peer), sync."""

    _transport: httpx.BaseTransport

    def _new_transport(self, ca_file: str | None) -> httpx.BaseTransport:
        return httpx.HTTPTransport(verify=tls_context(ca_file), limits=POOL_LIMITS)

    def close(self) -> None:
        """Close the pool (a no-op on a scoped view; close the client it came from)."""
        if self._owns_transport:
            self._transport.close()

    def send(self, call: Call[T]) -> T:
        """Send ``call`` (again, as its kind allows: core.ov.endpoint) and decode its answer."""
        tries = self._tries(call)
        for attempt in range(tries):
            try:
                return call.decode(self._once(call))
            except OVError as err:
                delay = self._wait_before_next(call, err, attempt, tries)
                if delay is None:
                    raise
                if delay > 0:
                    time.sleep(delay)
        raise AssertionError("unreachable")

    def _once(self, call: Call[Any]) -> Any:
        started = now()
        try:
            resp = self._transport.handle_request(self._request(call))
            try:
                resp.read()
            finally:
                resp.close()
        except httpx.TransportError as exc:
            raise self._unreachable(call, exc, started) from exc
        return self._answer(call, resp, started)

    # --- the commit jobs' calls ---------------------------------------------------------

    def get_session(self, session_id: str) -> SessionState:
        return self.send(calls.get_session(session_id))

    def commit(
        self, session_id: str, *, keep_recent_count: int | None = None, enable_working_memory: bool | None = None
    ) -> CommitAccepted:
        return self.send(
            calls.commit(session_id, keep_recent_count=keep_recent_count, enable_working_memory=enable_working_memory)
        )

    def get_task(self, task_id: str) -> TaskState:
        return self.send(calls.get_task(task_id))

    def session_commit_tasks(self, session_id: str, *, limit: int = 20) -> list[TaskState]:
        """The session's commit tasks OV still knows, newest first."""
        return self.send(calls.session_commit_tasks(session_id, limit=limit))

    def get_context(self, session_id: str, *, token_budget: int) -> SessionContext:
        return self.send(calls.get_context(session_id, token_budget=token_budget))
