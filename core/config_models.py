"""The shapes of the settings that are more than a value: a caller of the RPC, a tenant's
quotas (core.config.Settings holds them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.config_names import camel


class RpcCredential(BaseModel):
    """One caller of the RPC: the token it sends, and which OV identities it may act as."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, alias_generator=camel)

    token: str = Field(min_length=16, repr=False)
    ov_keys: tuple[str, ...] = Field((), repr=False)
    """OV keys this caller may send (X-OpenViking-API-Key); empty: any key it sends."""
    service_key: bool | None = None
    """Whether a request sending no OV key acts with the service's own identity (``apiKey``,
    or dev mode); unset: only when ``ov_keys`` is empty. Else it acts with its first OV key."""

    @property
    def may_use_service_identity(self) -> bool:
        return self.service_key if self.service_key is not None else not self.ov_keys


QUOTA_KINDS = {
    "assembles": ("assembles_per_s", 1),
    "tool_calls": ("tool_calls_per_s", 1),
    "commits": ("commits_per_min", 60),
}
"""What a quota limits -> (its field of ``TenantQuota``, its window in seconds)."""


class TenantQuota(BaseModel):
    """One tenant's limits (``tenantQuotas``); a limit left out is no limit. Over one, the RPC
    answers 429 with ``Retry-After`` (the window's end) and a message naming the limit."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, alias_generator=camel)

    assembles_per_s: int | None = Field(None, ge=1)
    """assemble calls a second (the plugin passes a refused one through: the turn goes on)."""
    tool_calls_per_s: int | None = Field(None, ge=1)
    """tool calls a second."""
    commits_per_min: int | None = Field(None, ge=1)
    """commits asked for through the RPC a minute (compact, memory_store); capture's own, at the
    threshold or a session's end, are not refused (they keep OV's sessions short)."""
