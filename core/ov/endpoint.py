"""One OV identity and its wire, shared by the two OV clients: the async one
(core.ov.client) and the sync one (core.ov.sync_client). Everything but the IO is here: who
asks (API key, or dev-mode account and user, and an actor peer), the request a ``Call``
becomes, how a failure to reach OV reads (``OVUnavailable``), and whether and when a failed
try is made again. Each client only sends the request through its transport and sleeps.

The clients hand requests to an httpx transport, not to an ``httpx.Client``: the client's
per-request work (URL merging, cookies, auth and redirect handling, event hooks), none of
which OV needs, was a third of an OV call's CPU (bench/RESULTS.md). A transport is also the
seam tests and the fake OV plug into (``httpx.MockTransport``).
"""

from __future__ import annotations

import copy
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, Self

import httpx

from core.backoff import Backoff
from core.config import Settings
from core.ov.calls import Call
from core.ov.envelope import OVError, OVRefused, OVUnavailable, is_passing, unwrap
from core.ov.layout import BATCH_LIMIT

log = logging.getLogger("core.ov.client")

_DEFAULT = Settings.model_fields
"""The clients' defaults are the settings' (``core.config``)."""
POOL_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


def tls_context(ca_file: str | None) -> ssl.SSLContext | bool:
    """An https OV is verified against ``ca_file`` (a private CA), else the system's CAs."""
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


class OVEndpoint:
    """One OV identity (API key or dev-mode account/user, plus an optional actor peer) and
    how its calls go on the wire; ``transport`` is the client's (async or sync)."""

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
        transport: Any = None,
        peer: str | None = None,
        batch_max: int = BATCH_LIMIT,
        ca_file: str | None = None,
        on_request: Callable[[str | None], None] | None = None,
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
        self._owns_transport = True
        self._transport = transport or self._new_transport(ca_file)
        self.headers = self._identity_headers()

    def _new_transport(self, ca_file: str | None) -> Any:
        raise NotImplementedError  # the client's: httpx.AsyncHTTPTransport or httpx.HTTPTransport

    @classmethod
    def from_settings(
        cls, settings: Any, transport: Any = None, on_request: Callable[[str | None], None] | None = None
    ) -> Self:
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

    def scoped(self, *, peer: str | None = None, api_key: str | None = None) -> Self:
        """The same pool with another actor peer and/or API key (None keeps this client's)."""
        view = copy.copy(self)
        view.api_key, view.peer = api_key or self.api_key, peer or self.peer
        view._owns_transport = False  # closing a view leaves the pool to the client it came from
        view.headers = view._identity_headers()
        return view

    def _identity_headers(self) -> dict[str, str]:
        if self.api_key:
            headers = {"X-API-Key": self.api_key}
        else:
            headers = {"X-OpenViking-Account": self.account, "X-OpenViking-User": self.user}
        if self.peer:
            headers["X-OpenViking-Actor-Peer"] = self.peer
        return headers

    # --- the wire, without the IO -----------------------------------------------------------

    def _request(self, call: Call[Any]) -> httpx.Request:
        """The request ``call`` is, as this identity, for one try (told to ``on_request``: each
        try counts); its timeout in the request's extensions, where httpx's client puts it for
        the transport."""
        options = dict(call.options)
        timeout = options.pop("timeout", None) or httpx.Timeout(self.timeout)
        if self.on_request is not None:
            self.on_request(self.api_key)
        return httpx.Request(
            call.method,
            self.base_url + call.path,
            headers=self.headers,
            extensions={"timeout": timeout.as_dict()},
            **options,
        )

    def _tries(self, call: Call[Any]) -> int:
        return 1 + (max(0, self.retries) if call.idempotent else 0)

    def _wait_before_next(self, call: Call[Any], err: OVError, attempt: int, tries: int) -> float | None:
        """Seconds to wait before trying ``call`` again after ``err`` on try ``attempt`` (from
        0), or None: give up (a refused key stays refused; the caller waits it out as OV away)."""
        retryable = is_passing(err) and not isinstance(err, OVRefused)
        if not retryable or attempt == tries - 1:
            return None
        delay = Backoff(self.backoff).delay(attempt + 1)
        log.debug(
            "OV %s %s retry %d/%d in %.2fs after %s", call.method, call.path, attempt + 1, tries - 1, delay, err.code
        )
        return delay

    @staticmethod
    def _unreachable(call: Call[Any], exc: httpx.TransportError, started: float) -> OVUnavailable:
        """What a transport's failure to get an answer stands for: OV away."""
        log.debug("OV %s %s -> %s after %.1f ms", call.method, call.path, type(exc).__name__, _ms(started))
        if isinstance(exc, httpx.TimeoutException):
            err = OVUnavailable("UNAVAILABLE", f"timeout: {exc!r}")
        else:
            err = OVUnavailable("UNAVAILABLE", f"{type(exc).__name__}: {exc}")
        err.in_flight = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)  # sent
        return err

    @staticmethod
    def _answer(call: Call[Any], resp: httpx.Response, started: float) -> Any:
        log.debug("OV %s %s -> %d in %.1f ms", call.method, call.path, resp.status_code, _ms(started))
        return unwrap(resp, raw=call.raw)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def now() -> float:
    """When a try starts (for the debug log's milliseconds)."""
    return time.perf_counter()
