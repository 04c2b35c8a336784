"""The console's routes (``install_console``): the pages, the login form and the one action,
replaying dead letters. Forms are read as ``application/x-www-form-urlencoded`` bodies."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from workers.rpc.auth import CONSOLE_COOKIE, CONSOLE_LOGIN_PATH, CONSOLE_PATH, CREDENTIAL_STATE, match, may_act
from workers.rpc.console.chart import lag_chart
from workers.rpc.console.views import REASONS, as_json, read_deployment, read_session, session_address
from workers.rpc.context import RpcError, Services
from workers.rpc.traces import TRACE_HEAD, TRACE_TAIL
from workers.status import LAG_HISTORY_S
from workers.store.dead_letters import replay_dead_letters, replay_summary

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
        view = await asyncio.to_thread(read_deployment, svc.commit_redis, settings)
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
            may_act=may_act(_credential(request)),
            message=request.query_params.get("message"),
        )

    @app.get(CONSOLE_PATH + "/session", include_in_schema=False)
    async def session(request: Request) -> Response:
        q = request.query_params
        query = {k: q.get(k, "").strip() for k in ("key", "id", "agent", "user")}
        if not query["key"] and not query["id"]:
            return _page(request, "session.html", query=query, view=None, reasons=REASONS)
        address = session_address(
            settings, session_key=query["key"], session_id=query["id"], agent=query["agent"], user=query["user"]
        )
        view = await read_session(svc, address, query["key"] or None, by_key=not query["id"])
        return _page(request, "session.html", query=query, view=view, reasons=REASONS, head=TRACE_HEAD, tail=TRACE_TAIL)

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

    @app.post(CONSOLE_PATH + "/dead-letters/replay", include_in_schema=False)
    async def replay(request: Request) -> Response:
        if not may_act(_credential(request)):
            raise RpcError(403, "read_only", "this credential may look at the console, not act in it")
        form = await _form(request)
        ids = None if form.get("all") else form.get("id", [])
        if ids == []:
            return RedirectResponse(f"{CONSOLE_PATH}?message=Nothing+checked+to+replay.", status_code=303)
        started = time.monotonic()
        results = await asyncio.to_thread(replay_dead_letters, svc.commit_redis, settings, ids)
        said = f"{replay_summary(results)}, in {time.monotonic() - started:.1f} s."
        return RedirectResponse(f"{CONSOLE_PATH}?{urlencode({'message': said})}", status_code=303)

    @app.get("/v1/sessions/inspect", tags=["ops"])
    async def inspect(
        sessionKey: str | None = None, sessionId: str | None = None, agent: str | None = None, user: str | None = None
    ) -> dict[str, Any]:
        """One session as the console's inspector shows it: what assemble answered last (message
        previews, budget, why), the last recall's memories with their scores, the snapshot's
        version and age, the commits (newest first) and the subagent lineage."""
        address = session_address(settings, session_key=sessionKey, session_id=sessionId, agent=agent, user=user)
        return as_json(await read_session(svc, address, sessionKey, by_key=not sessionId))
