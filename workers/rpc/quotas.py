"""Per-tenant quotas on the RPC (``tenantQuotas``, core.config_models.TenantQuota): assembles
and tool calls a second, commits asked for through the RPC a minute. Over one, the call is
answered 429 with ``Retry-After`` (the window's end) and a message naming the limit; the plugin
passes a refused assemble through (the turn goes on, its capture unaffected).

A fixed window per tenant and kind in Redis (``Keys.quota``: one INCR and EXPIRE in one round
trip), so the limit holds across every RPC process. Only a tenant with a limit pays the round
trip; with Redis away the call is let through (the quota is not worth a refused turn).
"""

from __future__ import annotations

import logging
import math
import time

from core.config_models import QUOTA_KINDS
from core.usage import OWN_USER
from workers.rpc.context import Caller, RpcError, Services
from workers.store.connection import REDIS_ERRORS
from workers.store.keys import Keys
from workers.store.usage import TALLY

log = logging.getLogger(__name__)

WINDOW_NAMES = {1: "second", 60: "minute"}

clock = time.time
"""The time windows are cut by (a test fixes it: a window's edge between two calls is not a test)."""


class QuotaExceeded(RpcError):
    """A 429: the tenant is over ``kind``'s limit until ``retry_after_s`` from now."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(429, "quota_exceeded", message)
        self.retry_after_s = retry_after_s


async def spend(svc: Services, caller: Caller, kind: str) -> None:
    """Count one ``kind`` call (``QUOTA_KINDS``) of the caller's tenant; QuotaExceeded when
    that makes it over its limit."""
    limit = svc.settings.quota_for(caller.tenant, kind)
    if limit is None:
        return
    window_s = QUOTA_KINDS[kind][1]
    now = clock()
    window = int(now // window_s)
    tenant = caller.tenant or OWN_USER
    key = Keys(svc.settings.key_prefix).quota(kind, tenant, window)
    try:
        async with svc.redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, window_s + 1)
            used, _ = await pipe.execute()
    except REDIS_ERRORS as exc:
        log.debug("quota of %s not counted (Redis: %s): let through", tenant, exc)
        return
    if int(used) <= limit:
        return
    TALLY.add(caller.tenant, "quota_refusals")
    retry_after = max(1, math.ceil((window + 1) * window_s - now))
    raise QuotaExceeded(
        f"tenant {tenant} is over its quota of {limit} {kind.replace('_', ' ')} a {WINDOW_NAMES[window_s]}"
        f" (tenantQuotas); try again in {retry_after} s",
        retry_after,
    )
