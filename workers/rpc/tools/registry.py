"""The agent tools behind ``POST /v1/tools/{name}``: registry and dispatch.

Each tool is an async function ``(services, caller, params) -> ToolResult``
with a pydantic model for its params (so a bad call is a 422 naming the
field). The tools themselves live in ``memory``, ``resources`` and
``archive`` (their shared types in ``base``); this module knows their names
and the rules all share:
bypassed sessions skip OV, and OV trouble becomes an HTTP error with OV's
code and message (503 when OV is unreachable, never a 500).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from core.ov.client import OVError, OVUnavailable
from workers.rpc.context import Caller, RpcError, Services, rpc_error_for
from workers.rpc.quotas import spend
from workers.rpc.tools import archive, memory, resources
from workers.rpc.tools.base import Tool, ToolResult, text_result
from workers.store.usage import TALLY

log = logging.getLogger(__name__)

_TOOLS: dict[str, Tool] = {tool.name: tool for tool in (*memory.TOOLS, *resources.TOOLS, *archive.TOOLS)}


def tools() -> dict[str, Tool]:
    """Every tool by name."""
    return _TOOLS


def validate_params(tool: Tool, params: dict[str, Any]) -> BaseModel:
    """The tool's params model, or a 422 naming the first bad field (``params.query``)."""
    try:
        return tool.params.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in ("params", *first.get("loc", ())))
        raise RpcError(422, "invalid_params", f"{loc}: {first.get('msg', 'invalid')}", loc) from None


def bypassed_result(name: str) -> ToolResult:
    return text_result(
        f"OpenViking is bypassed for this session (bypassSessionPatterns); {name} was skipped.",
        action="bypassed",
        reason="session_bypassed",
        toolName=name,
    )


async def run_tool(svc: Services, caller: Caller, name: str, raw_params: dict[str, Any]) -> ToolResult:
    tool = tools().get(name)
    if tool is None:
        raise RpcError(404, "unknown_tool", f"no tool {name!r}; tools: {', '.join(sorted(tools()))}")
    params = validate_params(tool, raw_params)
    await spend(svc, caller, "tool_calls")  # a 429 over the tenant's quota (workers.rpc.quotas)
    TALLY.add(caller.tenant, "tool_calls")  # the tenant's usage (workers.store.usage)
    if caller.bypassed:
        svc.metrics.tool_calls.labels(name, "bypassed").inc()
        return bypassed_result(name)
    try:
        result = await tool.run(svc, caller, params)
    except OVUnavailable as exc:
        svc.metrics.tool_calls.labels(name, "ov_unavailable").inc()
        svc.metrics.ov_unavailable.labels("tool").inc()
        log.warning("tool %s: OV unavailable: %s", name, exc)
        raise rpc_error_for(exc) from None
    except OVError as exc:
        svc.metrics.tool_calls.labels(name, "ov_error").inc()
        log.warning("tool %s: OV answered %s: %s", name, exc.code, exc.message)
        raise rpc_error_for(exc) from None
    except RpcError:
        svc.metrics.tool_calls.labels(name, "rejected").inc()
        raise
    svc.metrics.tool_calls.labels(name, "ok").inc()
    return result
