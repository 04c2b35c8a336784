"""The console's routes (``install_console``): the pages, the login form and the one action,
replaying dead letters. Forms are read as ``application/x-www-form-urlencoded`` bodies."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from core.usage import COLUMNS, add_up, busiest_first
from workers.rpc.auth import (
    CONSOLE_COOKIE,
    CONSOLE_LOGIN_PATH,
    CONSOLE_PATH,
    CREDENTIAL_STATE,
    match,
    may_act,
    visible_tenants,
)
from workers.rpc.console.chart import lag_chart, usage_chart
from workers.rpc.console.views import (
    REASONS,
    act_on_letters,
    as_json,
    inspect_session,
    read_deployment,
    recent_sessions,
)
from workers.rpc.context import RpcError, Services
from workers.rpc.traces import TRACE_HEAD, TRACE_TAIL
from workers.rpc.usage import seen
from workers.status import LAG_HISTORY_S
from workers.store.usage import read_usage

FORM_MAX_BYTES = 64 * 1024


def _utc(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{max(0.0, seconds):.0f} s ago"
    return f"{seconds / 60:.0f} min ago" if seconds < 7200 else f"{seconds / 3600:.1f} h ago"


templates = Environment(loader=PackageLoader("workers.rpc.console"), autoescape=select_autoescape(), auto_reload=False)
templates.filters["utc"] = _utc
templates.filters["ago"] = _ago


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    signed_in = CONSOLE_COOKIE in request.cookies
    html = templates.get_template(name).render(signed_in=signed_in, **context)
    return HTMLResponse(html, status_code=status_code, headers={"cache-control": "no-store"})


async def _form(request: Request) -> dict[str, list[str]]:
    body = await request.body()
    if len(body) > FORM_MAX_BYTES:
        raise RpcError(413, "form_too_large", f"a console form is at most {FORM_MAX_BYTES} bytes")
    return parse_qs(body.decode("utf-8", "replace"))


def _credential(request: Request) -> Any:
    return request.scope.get("state", {}).get(CREDENTIAL_STATE)


def install_console(app: FastAPI, svc: Services) -> None:
    """Serve the console under ``/console`` (behind the RPC's credentials: workers.rpc.auth)."""
    settings = svc.settings

    @app.get(CONSOLE_PATH, include_in_schema=False)
    async def deployment(request: Request) -> Response:
        credential = _credential(request)
        tenants = visible_tenants(settings, credential)
        view = await asyncio.to_thread(read_deployment, svc.commit_redis, settings, tenants)
        now_ms = view.status.now_ms
        chart = Markup(lag_chart(view.lag, now_ms=now_ms, span_s=LAG_HISTORY_S))
        backlog = sum((s.unread or 0) + s.pending for s in view.status.shards)
        live = sum(1 for p in view.status.processes if p.state != "stale")
        return _page(
            request,
            "deployment.html",
            status=view.status,
            chart=chart,
            backlog=backlog,
            live=live,
            dead_letters=view.dead_letters,
            scoped=tenants is not None,
            may_act=may_act(credential),
            message=request.query_params.get("message"),
        )

    @app.get(CONSOLE_PATH + "/session", include_in_schema=False)
    async def session(request: Request) -> Response:
        q = request.query_params
        query = {k: q.get(k, "").strip() for k in ("key", "id", "agent", "user")}
        tenants = visible_tenants(settings, _credential(request))
        if not query["key"] and not query["id"]:
            recent = await asyncio.to_thread(recent_sessions, svc.commit_redis, settings, tenants)
            return _page(request, "session.html", query=query, view=None, recent=recent, now=time.time())
        view = await inspect_session(
            svc,
            tenants,
            session_key=query["key"] or None,
            session_id=query["id"] or None,
            agent=query["agent"] or None,
            user=query["user"] or None,
        )
        return _page(
            request,
            "session.html",
            query=query,
            view=view,
            reasons=REASONS,
            head=TRACE_HEAD,
            tail=TRACE_TAIL,
        )

    @app.get(CONSOLE_LOGIN_PATH, include_in_schema=False)
    async def login_form(request: Request) -> Response:
        return _page(request, "login.html")

    @app.post(CONSOLE_LOGIN_PATH, include_in_schema=False)
    async def login(request: Request) -> Response:
        token = ((await _form(request)).get("token") or [""])[0].strip()
        if settings.credentials and match(settings.credentials, token) is None:
            svc.metrics.unauthorized.labels("wrong" if token else "missing").inc()
            return _page(request, "login.html", status_code=401, message="That token is not valid.")
        answer = RedirectResponse(CONSOLE_PATH, status_code=303)
        answer.set_cookie(
            CONSOLE_COOKIE,
            token,
            path=CONSOLE_PATH,
            httponly=True,
            samesite="strict",
            secure=settings.rpc_tls_cert_file is not None,
        )
        return answer

    @app.post(CONSOLE_PATH + "/logout", include_in_schema=False)
    async def logout() -> Response:
        answer = RedirectResponse(CONSOLE_LOGIN_PATH, status_code=303)
        answer.delete_cookie(CONSOLE_COOKIE, path=CONSOLE_PATH)
        return answer

    @app.get(CONSOLE_PATH + "/usage", include_in_schema=False)
    async def usage(request: Request) -> Response:
        """Each tenant's usage (core.usage) the caller sees: the sums, and a chart of OV requests
        per hour or day for each tenant."""
        period = "hour" if request.query_params.get("period") == "hour" else "day"
        tenants = seen(settings, request.scope)
        count = 24 if period == "hour" else 14
        by_bucket = await asyncio.to_thread(read_usage, svc.commit_redis, settings, period, count, tenants=tenants)
        total = add_up(by_bucket.values())
        ranked = busiest_first(total)
        charts = {}
        for t in ranked:
            requests = [(b, u.get(t, {}).get("ov_requests", 0)) for b, u in by_bucket.items()]
            charts[t] = Markup(usage_chart(t, requests, what="OV requests"))
        return _page(
            request,
            "usage.html",
            period=period,
            buckets=list(by_bucket),
            tenants=ranked,
            total=total,
            charts=charts,
            columns=COLUMNS,
            scoped=tenants is not None,
        )

    @app.post(CONSOLE_PATH + "/dead-letters/{action}", include_in_schema=False)
    async def act(request: Request, action: str) -> Response:
        """Replay (the checked, or all) or drop (the checked) dead letters; the page says what was done."""
        if action not in ("replay", "drop"):
            raise RpcError(404, "not_found", f"no console action {action!r} (replay or drop)")
        credential = _credential(request)
        if not may_act(credential):
            raise RpcError(403, "read_only", "this credential may look at the console, not act in it")
        form = await _form(request)
        ids = None if form.get("all") and action == "replay" else form.get("id", [])
        if ids == []:
            return RedirectResponse(f"{CONSOLE_PATH}?message=Nothing+checked+to+{action}.", status_code=303)
        started = time.monotonic()
        tenants = visible_tenants(settings, credential)
        said = await asyncio.to_thread(act_on_letters, svc.commit_redis, settings, tenants, action, ids)
        said = f"{said[0].upper()}{said[1:]}, in {time.monotonic() - started:.1f} s."
        return RedirectResponse(f"{CONSOLE_PATH}?{urlencode({'message': said})}", status_code=303)

    @app.get("/v1/sessions/inspect", tags=["ops"])
    async def inspect(
        request: Request,
        sessionKey: str | None = None,
        sessionId: str | None = None,
        agent: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """One session as the console's inspector shows it: what assemble answered last (message
        previews, budget, why), the last recall's memories with their scores, the snapshot's
        version and age, the commits (newest first) and the subagent lineage. Named by its id
        alone, the session is found under whichever agent has it (``others``: the rest). A
        credential limited to some tenants' OV keys sees only their sessions: another
        tenant's answers as an unknown session does."""
        tenants = visible_tenants(settings, _credential(request))
        view = await inspect_session(
            svc, tenants, session_key=sessionKey, session_id=sessionId, agent=agent or None, user=user or None
        )
        return as_json(view)

    @app.get("/v1/sessions/recent", tags=["ops"])
    async def recent(request: Request) -> dict[str, Any]:
        """The sessions assemble answered most recently (newest first), of the tenants the
        caller's credential sees: what the console's inspector lists."""
        tenants = visible_tenants(settings, _credential(request))
        found = await asyncio.to_thread(recent_sessions, svc.commit_redis, settings, tenants)
        return {"sessions": msgspec.to_builtins(found)}
