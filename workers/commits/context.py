"""The per-process context of the commit jobs, in the spirit of arq's ``ctx``.

A process that runs commit jobs (``ovstream worker``, the embedded worker of
``ovstream up``, tests) registers its Settings once (``register``). The jobs
carry only their request and the deployment's ``key_prefix``; the context
gives them the settings (API keys included, which never enter Redis), one
event loop (a daemon thread, so a job may run from sync code or from a thread
already running a loop), one OV connection pool and one asyncio Redis client
(for the snapshots, which live on event loops everywhere) shared by every job.

``set_ov_transport_factory`` points the pool at another transport (tests and
``ovstream up --fake-ov`` use a FakeOV's); it drops the pools built before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from core.config import Settings
from core.config_load import load_settings
from core.ov.client import OVClient
from core.session import SessionAddress
from workers.store.connection import connect, connect_async
from workers.store.event_loop import quiet_dropped_connections
from workers.store.usage import count_ov_request

T = TypeVar("T")
log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0
"""Longest wait for each part of a job context to close."""
TransportFactory = Callable[[Settings], httpx.AsyncBaseTransport | None]


class JobContext:
    """Settings, event loop and OV pool of the commit jobs of one ``key_prefix`` in this process."""

    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self._transport = transport
        self._loop = asyncio.new_event_loop()
        quiet_dropped_connections(self._loop)
        self._thread = threading.Thread(target=self._loop.run_forever, name="ovstream-jobs-loop", daemon=True)
        self._thread.start()
        self._ov: OVClient | None = None
        self.redis = connect_async(settings)
        """Used on the context's loop only (``run``)."""
        self.store = connect(settings)
        """The jobs' sync store client (streams and records; the queue's is RQ's own)."""

    def ov(self, address: SessionAddress) -> OVClient:
        """The shared pool, acting as ``address``'s agent with its tenant's API key (call on the loop)."""
        if self._ov is None:
            self._ov = OVClient.from_settings(
                self.settings, transport=self._transport, on_request=count_ov_request(self.settings)
            )
        key = self.settings.user_api_keys.get(address.tenant) if address.tenant else None
        return self._ov.scoped(peer=address.agent_id, api_key=key)

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()`` on the context's loop and wait for its result."""

        async def call() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()

    def close(self) -> None:
        """Close the OV pool and the Redis client, then stop the loop (bounded: a stuck
        job must not hold a shutdown up)."""
        self.store.close()
        closing = [self.redis.aclose()]
        if self._ov is not None:
            closing.append(self._ov.aclose())
            self._ov = None
        for coro in closing:
            try:
                asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=CLOSE_TIMEOUT_S)
            except Exception as exc:  # closing is best effort; the process may be going away
                log.warning("job context of %s: close did not finish: %r", self.settings.key_prefix, exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)


_settings: dict[str, Settings] = {}
_contexts: dict[str, JobContext] = {}
_transport_factory: TransportFactory | None = None
_lock = threading.Lock()


def register(settings: Settings) -> None:
    """Jobs of ``settings.key_prefix`` run in this process with these settings."""
    with _lock:
        if _settings.get(settings.key_prefix) is not settings:
            _settings[settings.key_prefix] = settings
            _drop(settings.key_prefix)


def set_ov_transport_factory(factory: TransportFactory | None) -> None:
    """Make jobs reach OV through ``factory(settings)`` (e.g. a FakeOV's transport); None: real HTTP."""
    global _transport_factory
    with _lock:
        _transport_factory = factory
        for prefix in list(_contexts):
            _drop(prefix)


def context_for(key_prefix: str) -> JobContext:
    """The context of ``key_prefix``'s jobs; unregistered, the settings come from the config file
    and the environment."""
    with _lock:
        ctx = _contexts.get(key_prefix)
        if ctx is None:
            settings = _settings.get(key_prefix) or load_settings(key_prefix=key_prefix)
            transport = _transport_factory(settings) if _transport_factory else None
            ctx = _contexts[key_prefix] = JobContext(settings, transport)
        return ctx


def _drop(prefix: str) -> None:
    ctx = _contexts.pop(prefix, None)
    if ctx is not None:
        ctx.close()


def context_of(settings: Settings) -> JobContext:
    """Register ``settings`` and return their context (the embedded mode, tests)."""
    register(settings)
    return context_for(settings.key_prefix)
