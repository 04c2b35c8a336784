"""Who may call the RPC, and as which OV identity.

With credentials configured (``rpcToken``, ``rpcCredentials``), every route but
``/healthz`` needs ``Authorization: Bearer <token>`` (or ``X-Ovstream-Token``);
missing or wrong: 401, counted. Tokens are compared in constant time, each one,
whatever matched. The credential then decides the OV identity
(``ov_key_for``): the OV key a request sends must be one the credential lists,
and a request sending none acts with the service's own key only when its
credential allows it. Without credentials the RPC trusts its callers (loopback),
and ``cli_rpc`` refuses to listen anywhere else unless told to
(``rpcAllowUnauthenticated``).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie

from starlette.datastructures import Headers
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from core.config import RpcCredential, Settings
from core.session import tenant_for_api_key
from workers.rpc.context import RpcError, bearer_token
from workers.rpc.metrics import RpcMetrics
from workers.rpc.responses import error_response

TOKEN_HEADER = "x-ovstream-token"
CONSOLE_PATH = "/console"
CONSOLE_LOGIN_PATH = "/console/login"
CONSOLE_COOKIE = "ovstream_console"
"""The console's pages take the token from this cookie too (set by its login form: a browser
sends no Authorization header of its own)."""
OPEN_PATHS = frozenset({"/healthz", CONSOLE_LOGIN_PATH})
"""Answered without a token: what a load balancer or orchestrator probes, and the console's
login form."""
CREDENTIAL_STATE = "ovstream_credential"
"""Where the request's credential is kept (``scope["state"]``, i.e. ``request.state``)."""


def token_of(headers: Mapping[str, str]) -> str | None:
    """The RPC token a request sends: ``X-Ovstream-Token``, else ``Authorization: Bearer``."""
    return (headers.get(TOKEN_HEADER) or "").strip() or bearer_token(headers)


def match(credentials: Mapping[str, RpcCredential], token: str | None) -> tuple[str, RpcCredential] | None:
    """The credential ``token`` belongs to; every token is compared (constant time each)."""
    found: tuple[str, RpcCredential] | None = None
    given = (token or "").encode()
    for name, credential in credentials.items():
        if hmac.compare_digest(given, credential.token.encode()) and token:
            found = (name, credential)
    return found


def ov_key_for(credential: RpcCredential | None, sent_key: str | None) -> str | None:
    """The OV key a request acts with (None: the service's own identity), or a 403."""
    if credential is None:  # no credentials configured: the caller's key, as it sent it
        return sent_key
    if sent_key:
        if credential.ov_keys and not any(hmac.compare_digest(sent_key, k) for k in credential.ov_keys):
            raise RpcError(403, "ov_key_not_allowed", "this RPC credential may not act with that OpenViking key")
        return sent_key
    if credential.may_use_service_identity:
        return None
    if credential.ov_keys:
        return credential.ov_keys[0]
    raise RpcError(403, "ov_key_required", "this RPC credential must send its OpenViking key (X-OpenViking-API-Key)")


class RequireToken:
    """ASGI middleware: 401 for a request without a valid token (every path but OPEN_PATHS)."""

    def __init__(self, app: ASGIApp, settings: Settings, metrics: RpcMetrics) -> None:
        self.app = app
        self.credentials = settings.credentials
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.credentials or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        console = is_console(scope["path"])
        token = token_of(headers) or (console_cookie(headers) if console else None)
        found = match(self.credentials, token)
        if found is None:
            self.metrics.unauthorized.labels("missing" if token is None else "wrong").inc()
            if console:  # a person at a browser: the login form, not a JSON error
                await RedirectResponse(CONSOLE_LOGIN_PATH, status_code=303)(scope, receive, send)
                return
            why = "a token is required" if token is None else "the token is not valid"
            answer = error_response(401, "unauthorized", f"{why}: send Authorization: Bearer <rpcToken>")
            answer.headers["www-authenticate"] = 'Bearer realm="ovstream"'
            await answer(scope, receive, send)
            return
        scope.setdefault("state", {})[CREDENTIAL_STATE] = found[1]
        await self.app(scope, receive, send)


def is_console(path: str) -> bool:
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


def console_cookie(headers: Headers) -> str | None:
    """The token the console's login form left in the browser's cookie, if any."""
    cookies = SimpleCookie()
    try:
        cookies.load(headers.get("cookie", ""))
    except CookieError:
        return None
    morsel = cookies.get(CONSOLE_COOKIE)
    return morsel.value.strip() or None if morsel is not None else None


def may_act(credential: RpcCredential | None) -> bool:
    """Whether the console lets this caller act (replay dead letters), not only look: a
    credential acting as the service itself (``may_use_service_identity``), or any caller
    of an RPC without credentials (loopback, trusted)."""
    return credential is None or credential.may_use_service_identity


def visible_tenants(settings: Settings, credential: RpcCredential | None) -> frozenset[str | None] | None:
    """The tenants whose sessions and dead letters a caller sees (the console, ``/v1/sessions/
    inspect``): those of the OV keys its credential lists, and the service's own (None) when
    it may act as the service. None: every tenant (no credentials configured, or a credential
    that may send any key)."""
    if credential is None or not credential.ov_keys:
        return None
    tenants: set[str | None] = {tenant_for_api_key(settings, key) for key in credential.ov_keys}
    if credential.may_use_service_identity:
        tenants.add(None)
    return frozenset(tenants)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_problem(settings: Settings, host: str) -> str | None:
    """Why the RPC must not listen on ``host`` as configured (None: it may)."""
    if is_loopback(host) or settings.credentials or settings.rpc_allow_unauthenticated:
        return None
    return (
        f"refusing to serve the RPC on {host} without authentication: set rpcToken (or rpcCredentials), "
        "or rpcAllowUnauthenticated=true to accept that anyone reaching the port acts as this service"
    )
