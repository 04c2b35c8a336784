"""``GET /v1/usage``: what each tenant cost, per hour or per day (core.usage, counted where the
work happens: workers.store.usage). A caller sees the tenants its credential may act as
(``visible_tenants``: those of its OV keys), every tenant only where the RPC has no credentials
or the credential may send any key; ``ovstream usage`` reads the same for an operator."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, Field
from starlette.types import Scope

from core.config import Settings
from core.usage import OWN_USER, USAGE, Usage, add_up
from workers.rpc.auth import CREDENTIAL_STATE, visible_tenants
from workers.rpc.context import Services
from workers.store.usage import read_usage

USAGE_BUCKETS_MAX = 24 * 90
"""Buckets one request may ask for (90 days of hours)."""


class UsageBucket(BaseModel):
    bucket: str = Field(..., description="UTC hour (2026-12-06T11) or day (2026-12-06).")
    tenants: dict[str, dict[str, int]] = Field(..., description="tenant -> count -> value ('-': the service's own).")


class UsageAnswer(BaseModel):
    period: Literal["hour", "day"]
    counts: dict[str, str] = Field(..., description="What each count counts.")
    buckets: list[UsageBucket] = Field(..., description="Oldest first.")
    total: dict[str, dict[str, int]] = Field(..., description="tenant -> count -> the buckets' sum.")


def seen(settings: Settings, scope: Scope) -> set[str] | None:
    """The tenant labels (as usage names them) the request's credential sees; None: all."""
    tenants = visible_tenants(settings, scope.get("state", {}).get(CREDENTIAL_STATE))
    return None if tenants is None else {t or OWN_USER for t in tenants}


def usage_answer(by_bucket: dict[str, Usage], period: str) -> dict[str, Any]:
    """The answer for buckets read by ``read_usage`` (``ovstream usage --json`` prints it too)."""
    return {
        "period": period,
        "counts": USAGE,
        "buckets": [{"bucket": name, "tenants": usage} for name, usage in by_bucket.items()],
        "total": add_up(by_bucket.values()),
    }


async def usage_route(svc: Services, scope: Scope, period: str, buckets: int, tenant: str | None) -> dict[str, Any]:
    tenants = seen(svc.settings, scope)
    if tenant is not None:
        tenants = {tenant} if tenants is None or tenant in tenants else set()
    by_bucket = await asyncio.to_thread(read_usage, svc.commit_redis, svc.settings, period, buckets, tenants=tenants)
    return usage_answer(by_bucket, period)
