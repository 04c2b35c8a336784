"""The per-process context of the commit jobs, in the spirit of arq's ``ctx``.

A process that runs commit jobs (``ovstream worker``, the embedded worker of
``ovstream up``, tests) registers its Settings once (``register``). The jobs
carry only their request and the deployment's ``key_prefix``; the context
gives them the settings (API keys included, which never enter Redis), one
event loop (a daemon thread, so a job may run async work, a repair's OV calls, from sync code
or from a thread already running a loop), OV connection pools (one per lane of work:
``OV_LANES``; sync ones for the commit jobs and the poller's reads on their own threads,
async ones for the loop) and one sync store client (records, streams, the snapshot after a
commit), shared by every job.

``set_ov_transport_factory`` points the pool at another transport (tests and
``ovstream up --fake-ov`` use a FakeOV's); it drops the pools built before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import httpx
import uvloop

from core.config import Settings
from core.config_load import load_settings
from core.ov.client import OVClient
from core.ov.sync_client import OVSyncClient
from core.session import SessionAddress
from workers.store.connection import connect
from workers.store.event_loop import quiet_dropped_connections
from workers.store.usage import count_ov_request

T = TypeVar("T")
C = TypeVar("C", OVClient, OVSyncClient)
log = logging.getLogger(__name__)

OV_LANES = 9
"""OV connection pools a job context keeps: one per lane of work (a commit job's thread; each
of the poller's read threads: ``lane``). httpcore looks at every connection of a pool as each
request starts and ends (an idle one's socket polled, anyio building the socket's attributes,
a getpeername among them, each time): with one pool of nine connections that was a quarter of
the jobs' event loop's CPU (bench/RESULTS.md); a lane's own pool holds one or two."""
CLOSE_TIMEOUT_S = 5.0
"""Longest wait for each part of a job context to close."""
TransportFactory = Callable[[Settings], httpx.AsyncBaseTransport | None]


class JobContext:
    """Settings, event loop and OV pool of the commit jobs of one ``key_prefix`` in this process."""

    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self._transport = transport
        self._loop = uvloop.new_event_loop()  # the faster loop, as capture and the RPC run on (bench/RESULTS.md)
        quiet_dropped_connections(self._loop)
        self._thread = threading.Thread(target=self._loop.run_forever, name="ovstream-jobs-loop", daemon=True)
        self._thread.start()
        self._ov: dict[int, OVClient] = {}
        """The async pool of each lane (``OV_LANES``), made on its first call."""
        self._ov_sync: dict[int, OVSyncClient] = {}
        """The sync pool of each lane, made on its first call."""
        self._sync_transport = _sync_twin(transport)
        self._ov_lock = threading.Lock()
        self.store = connect(settings)
        """The jobs' sync store client (streams and records; the queue's is RQ's own)."""

    def ov(self, address: SessionAddress) -> OVClient:
        """The async pool of the caller's lane (``lane``), acting as ``address``'s agent with its
        tenant's API key (use it on the loop: ``run``)."""
        return self._scoped(self._ov, OVClient, self._transport, address)

    def ov_sync(self, address: SessionAddress) -> OVSyncClient:
        """The sync pool of the caller's lane (``lane``), acting as ``address``'s agent with its
        tenant's API key: the commit jobs' and the poller's calls, on their own threads."""
        return self._scoped(self._ov_sync, OVSyncClient, self._sync_transport, address)

    def _scoped(self, pools: dict[int, C], kind: type[C], transport: object, address: SessionAddress) -> C:
        n = _lane_now()
        with self._ov_lock:  # two threads may make a lane's pool at once (a job's and the loop)
            pool = pools.get(n)
            if pool is None:
                pool = pools[n] = kind.from_settings(
                    self.settings, transport=transport, on_request=count_ov_request(self.settings)
                )
        key = self.settings.user_api_keys.get(address.tenant) if address.tenant else None
        return pool.scoped(peer=address.agent_id, api_key=key)

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()`` on the context's loop and wait for its result (in the caller's lane)."""
        n = _lane_now()

        async def call() -> T:
            _loop_lane.set(n)  # this task's own context: ``ov`` inside it picks the caller's pool
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()

    def close(self) -> None:
        """Close the OV pools and the store client, then stop the loop (bounded: a stuck
        job must not hold a shutdown up)."""
        self.store.close()
        for sync_pool in self._ov_sync.values():
            sync_pool.close()
        closing = [pool.aclose() for pool in self._ov.values()]
        self._ov, self._ov_sync = {}, {}
        for coro in closing:
            try:
                asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=CLOSE_TIMEOUT_S)
            except Exception as exc:  # closing is best effort; the process may be going away
                log.warning("job context of %s: close did not finish: %r", self.settings.key_prefix, exc)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)


def _sync_twin(transport: httpx.AsyncBaseTransport | None) -> httpx.BaseTransport | None:
    """The sync side of a test's transport (``httpx.MockTransport`` is both; None: real HTTP)."""
    if transport is None or isinstance(transport, httpx.BaseTransport):
        return transport
    raise TypeError(f"the jobs' OV transport must serve sync clients too (httpx.MockTransport): {transport!r}")


_thread_lane = threading.local()
_loop_lane: contextvars.ContextVar[int | None] = contextvars.ContextVar("ovstream_ov_lane", default=None)


@contextlib.contextmanager
def lane(n: int) -> Iterator[None]:
    """OV calls this thread makes inside the block (``JobContext.run``) go through pool ``n``
    (of ``OV_LANES``); outside any, pool 0 (a commit job's)."""
    _thread_lane.n = n % OV_LANES
    try:
        yield
    finally:
        _thread_lane.n = 0


def _lane_now() -> int:
    """The lane of the code running: the task's on the loop (``run``), else its thread's."""
    on_loop = _loop_lane.get()
    return on_loop if on_loop is not None else getattr(_thread_lane, "n", 0)


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
