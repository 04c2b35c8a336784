"""One typed settings object, loaded from ``config/ovstream.toml`` and ``OVSTREAM_*``.

Keys may be written in the seed's camelCase (``baseUrl``) or in snake_case
(``base_url``). Environment variables win over the file; the file wins over
the defaults in ``core.defaults``. Bad values fail at start with the key named.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from core import defaults as d
from core.config_names import (
    camel,
    env_field_of_parse_error,
    env_fields,
    env_name,
    snake,
    unknown_env,
    unknown_key_hint,
)

DEFAULT_CONFIG_PATH = Path("config/ovstream.toml")
RETIRED_KEYS = {
    "claim_idle_ms": "a shard's new owner claims its pending entries as soon as it wins the lease",
    "stream_maxlen": "the streams are no longer capped at publish; capture trims only what it applied",
}
"""Keys earlier versions read, accepted (with a warning) so old config files still load."""
CONFIG_PATH_ENV = "OVSTREAM_CONFIG"

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the key."""


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


SECRET_KEYS = ("api_key", "user_api_keys", "rpc_token", "rpc_credentials")
"""Settings that hold secrets: never in a repr or a log; each may also be read from a file
(``<key>_file`` in the TOML, ``OVSTREAM_<KEY>_FILE`` in the environment)."""


class Settings(BaseSettings):
    """Everything ovstream can be told. Pass one instance in; never read globals."""

    model_config = SettingsConfigDict(
        env_prefix="OVSTREAM_",
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        alias_generator=camel,
    )

    # the seed's table
    base_url: str = Field(d.BASE_URL)
    agent_prefix: str = Field(d.AGENT_PREFIX)
    auto_capture: bool = Field(d.AUTO_CAPTURE)
    auto_recall: bool = Field(d.AUTO_RECALL)
    commit_token_threshold: int = Field(d.COMMIT_TOKEN_THRESHOLD, ge=1)
    commit_keep_recent_count: int = Field(d.COMMIT_KEEP_RECENT_COUNT, ge=0)
    recall_limit: int = Field(d.RECALL_LIMIT, ge=1, le=100)
    recall_score_threshold: float = Field(d.RECALL_SCORE_THRESHOLD, ge=0.0, le=1.0)
    recall_max_injected_chars: int = Field(d.RECALL_MAX_INJECTED_CHARS, ge=1)
    recall_prefer_abstract: bool = Field(d.RECALL_PREFER_ABSTRACT)
    recall_resources: bool = Field(d.RECALL_RESOURCES)
    bypass_session_patterns: Annotated[tuple[str, ...], NoDecode] = Field(d.BYPASS_SESSION_PATTERNS)

    # identity and auth
    api_key: str | None = Field(None, repr=False)
    account: str = Field(d.OV_ACCOUNT, min_length=1)
    user: str = Field(d.OV_USER, min_length=1)
    user_api_keys: dict[str, str] = Field({}, repr=False)
    """Tenant label -> OV user key, for capture workers acting for several users."""

    # redis and streams
    redis_url: str = Field(d.REDIS_URL, repr=False)
    redis_ca_file: str | None = Field(None)
    """CA bundle verifying a ``rediss://`` server (default: the system's)."""
    redis_cert_file: str | None = Field(None)
    redis_key_file: str | None = Field(None)
    """Client certificate and key, for a Redis that requires them (``tls-auth-clients yes``)."""
    redis_cluster: bool = Field(False)
    """``redis_url`` names one node of a Redis Cluster: streams, session records and leases are
    spread over its masters by their ``{s<n>}`` hash tags (needs ``queue_redis_url``)."""
    queue_redis_url: str | None = Field(None, repr=False)
    """The Redis of the RQ commit queue (default: ``redis_url``). RQ does not speak Redis
    Cluster, so with ``redis_cluster`` the queue lives on a plain Redis of its own."""
    key_prefix: str = Field(d.KEY_PREFIX, min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    shards: int = Field(d.SHARDS, ge=1, le=1024)
    consumer_group: str = Field(d.CONSUMER_GROUP, min_length=1)
    capture_batch: int = Field(d.CAPTURE_BATCH, ge=50, le=10_000)
    capture_block_ms: int = Field(d.CAPTURE_BLOCK_MS, ge=1)
    max_deliveries: int = Field(d.MAX_DELIVERIES, ge=1)
    ov_batch_max: int = Field(d.OV_BATCH_MAX, ge=1, le=100)
    dead_letter_maxlen: int = Field(d.DEAD_LETTER_MAXLEN, ge=1)

    # the capture worker
    capture_lease_ms: int = Field(d.CAPTURE_LEASE_MS, ge=100)
    capture_ov_concurrency: int = Field(d.CAPTURE_OV_CONCURRENCY, ge=1)
    capture_reads_per_round: int = Field(d.CAPTURE_READS_PER_ROUND, ge=1, le=100)
    capture_round_max_bytes: int = Field(d.CAPTURE_ROUND_MAX_BYTES, ge=1024)
    capture_retry_backoff_max_s: float = Field(d.CAPTURE_RETRY_BACKOFF_MAX_S, gt=0)
    capture_settle_recheck_s: float = Field(d.CAPTURE_SETTLE_RECHECK_S, ge=0)
    capture_ov_down_backoff_max_s: float = Field(d.CAPTURE_OV_DOWN_BACKOFF_MAX_S, gt=0)

    # commits and phase 2
    commit_queue: str = Field(d.COMMIT_QUEUE, min_length=1)
    commit_outcome_stream_maxlen: int = Field(d.COMMIT_OUTCOME_STREAM_MAXLEN, ge=1)
    commit_tenant_wait_s: float = Field(d.COMMIT_TENANT_WAIT_S, gt=0)
    phase2_poll_interval_s: float = Field(d.PHASE2_POLL_INTERVAL_S, gt=0)
    phase2_deadline_s: float = Field(d.PHASE2_DEADLINE_S, gt=0)
    phase2_read_retries: int = Field(d.PHASE2_READ_RETRIES, ge=0)
    compact_wait_s: float = Field(d.COMPACT_WAIT_S, gt=0)

    # OV client
    ov_ca_file: str | None = Field(None)
    """CA bundle verifying an ``https://`` OV (default: the system's)."""
    ov_timeout_s: float = Field(d.OV_TIMEOUT_S, gt=0)
    ov_write_timeout_s: float = Field(d.OV_WRITE_TIMEOUT_S, gt=0)
    ov_retries: int = Field(d.OV_RETRIES, ge=0, le=10)
    ov_backoff_s: float = Field(d.OV_BACKOFF_S, ge=0)
    recall_timeout_s: float = Field(d.RECALL_TIMEOUT_S, gt=0)
    assemble_timeout_s: float = Field(d.ASSEMBLE_TIMEOUT_S, gt=0)
    missing_session_ttl_s: float = Field(d.MISSING_SESSION_TTL_S, ge=0)
    recall_turn_ttl_s: int = Field(d.RECALL_TURN_TTL_S, ge=1)
    overlay_stream_scan: int = Field(d.OVERLAY_STREAM_SCAN, ge=0, le=10_000)

    # snapshots
    snapshot_token_budget: int = Field(d.SNAPSHOT_TOKEN_BUDGET, ge=1)
    snapshot_ttl_s: int = Field(d.SNAPSHOT_TTL_S, ge=1)

    # rpc
    rpc_host: str = Field(d.RPC_HOST)
    rpc_port: int = Field(d.RPC_PORT, ge=1, le=65535)
    max_body_bytes: int = Field(d.MAX_BODY_BYTES, ge=1024)
    rpc_workers: int = Field(1, ge=1, le=64)
    """Processes serving the RPC on one port (uvicorn's workers); each keeps its own caches."""
    rpc_token: str | None = Field(None, min_length=16, repr=False)
    """One shared token every RPC caller sends (``Authorization: Bearer``); full access."""
    rpc_credentials: dict[str, RpcCredential] = Field({}, repr=False)
    """Named callers, each with its token and the OV keys it may use (tokens rotate by
    listing the new one beside the old)."""
    rpc_allow_unauthenticated: bool = Field(False)
    """Serve a non-loopback ``rpcHost`` without any token (refused otherwise)."""
    log_format: Literal["text", "json"] = Field("text")
    """``json``: one JSON object per log line (workers.logs), for a log aggregator."""
    rpc_tls_cert_file: str | None = Field(None)
    rpc_tls_key_file: str | None = Field(None)
    """Serve the RPC over HTTPS with this certificate and key."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @field_validator("redis_url", "queue_redis_url")
    @classmethod
    def _redis_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("redis://", "rediss://", "unix://", "fakeredis://")):
            raise ValueError("must be a redis://, rediss://, unix:// or fakeredis:// URL")
        return v

    @model_validator(mode="after")
    def _cluster_needs_its_queue(self) -> Settings:
        if self.redis_cluster:
            if not self.redis_url.startswith(("redis://", "rediss://")):
                raise ValueError("redisCluster: redisUrl must be a redis:// or rediss:// URL of a cluster node")
            if self.queue_redis_url is None:
                raise ValueError(
                    "redisCluster: set queueRedisUrl to a plain (non-cluster) Redis for the RQ commit queue;"
                    " RQ does not speak Redis Cluster"
                )
        return self

    @field_validator("bypass_session_patterns", mode="before")
    @classmethod
    def _patterns(cls, v: Any) -> Any:
        if isinstance(v, str):  # env var: comma separated
            return tuple(p.strip() for p in v.split(",") if p.strip())
        return v

    @property
    def commit_queue_name(self) -> str:
        """The RQ queue of the commit jobs: ``commit_queue`` when set, else
        ``<key_prefix>-commits``, so two deployments on one Redis never share a queue."""
        if "commit_queue" in self.model_fields_set:
            return self.commit_queue
        return f"{self.key_prefix}{d.COMMIT_QUEUE_SUFFIX}"

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url.startswith("fakeredis://")

    @property
    def rq_redis_url(self) -> str:
        """Where the RQ commit queue lives: ``queue_redis_url``, else ``redis_url``."""
        return self.queue_redis_url or self.redis_url

    @property
    def credentials(self) -> dict[str, RpcCredential]:
        """Every RPC caller: ``rpc_credentials``, plus ``rpc_token`` as ``default``."""
        if self.rpc_token is None:
            return dict(self.rpc_credentials)
        return {"default": RpcCredential.model_validate({"token": self.rpc_token}), **self.rpc_credentials}

    def redacted_redis_url(self, url: str | None = None) -> str:
        """``url`` (default ``redis_url``) without its credentials, for logs."""
        scheme, sep, rest = (url or self.redis_url).partition("://")
        return scheme + sep + rest.rsplit("@", 1)[-1]


def _format_errors(err: ValidationError, where: Callable[[str], str]) -> str:
    """One line per bad value, under the name it was given by (``where``: a file key, an
    ``OVSTREAM_*`` variable or a keyword), with the nearest setting for a name that is none."""
    lines = []
    for e in err.errors():
        key = str(e["loc"][0]) if e["loc"] else ""
        rest = "".join(f".{p}" for p in e["loc"][1:])
        msg = e["msg"]
        if e["type"] == "extra_forbidden" and not rest:
            msg = f"not an ovstream setting{unknown_key_hint(key, Settings.model_fields)}"
        lines.append(f"{where(key) + rest if key else '<settings>'}: {msg}")
    return _one_message(lines)


def _one_message(lines: list[str]) -> str:
    """One line ``invalid configuration: <the problem>``, or a header and a problem per line."""
    if len(lines) == 1:
        return f"invalid configuration: {lines[0]}"
    return "\n  ".join(["invalid configuration:", *lines])


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Read the TOML file (if any), then the environment, then ``overrides``.

    The file is ``path``, else ``$OVSTREAM_CONFIG``, else ``config/ovstream.toml``
    when it exists. A missing explicit path, unreadable TOML or a bad value
    raises ``ConfigError`` naming the key.
    """
    explicit = path or os.environ.get(CONFIG_PATH_ENV)
    file_path = Path(explicit) if explicit else DEFAULT_CONFIG_PATH
    file_values: dict[str, Any] = {}
    if file_path.exists():
        try:
            raw = tomllib.loads(file_path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read {file_path}: {exc}") from exc
        file_values = raw.get("ovstream", raw)
    elif explicit:
        raise ConfigError(f"config file not found: {file_path}")
    for warning in unknown_env(os.environ, Settings.model_fields, SECRET_KEYS):
        log.warning("%s", warning)
    # Environment beats the file: drop file keys that the environment sets.
    env_set = env_fields(os.environ)
    merged = {k: v for k, v in file_values.items() if snake(k) not in env_set}
    merged.update(_secrets_from_files(merged))
    merged.update(overrides)
    for key in [k for k in merged if snake(k) in RETIRED_KEYS]:
        log.warning("config key %r is no longer used (%s); ignoring it", key, RETIRED_KEYS[snake(key)])
        del merged[key]

    def where(key: str) -> str:
        if key in overrides:
            return key
        if key in file_values and key in merged:
            return f"{key} (in {file_path})"
        if snake(key) in env_set:
            return env_name(snake(key))
        return key

    try:
        return Settings(**merged)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, where)) from exc
    except SettingsError as exc:  # an OVSTREAM_* value that is not valid JSON for a dict field
        field = env_field_of_parse_error(str(exc))
        if field is None:
            raise ConfigError(f"invalid configuration: {exc}") from exc
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(_one_message([f"{env_name(field)}: not a JSON object{cause}"])) from exc


def _secrets_from_files(values: dict[str, Any]) -> dict[str, Any]:
    """SECRET_KEYS read from files: ``<key>_file`` (or camelCase) in ``values`` (popped),
    or ``OVSTREAM_<KEY>_FILE``; a dict-valued key's file holds JSON. A key also given
    directly keeps that value."""
    out: dict[str, Any] = {}
    for key in SECRET_KEYS:
        path = None
        for name in (f"{key}_file", camel(f"{key}_file")):
            if name in values:
                path = values.pop(name)
        path = os.environ.get(f"OVSTREAM_{key.upper()}_FILE") or path
        if path is None or key in values or camel(key) in values or f"OVSTREAM_{key.upper()}" in os.environ:
            continue
        try:
            text = Path(str(path)).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"invalid configuration: {key}_file: cannot read {path}: {exc.strerror or exc}") from exc
        if key in ("user_api_keys", "rpc_credentials"):
            try:
                out[key] = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"invalid configuration: {key}_file: {path} is not JSON: {exc}") from exc
        else:
            out[key] = text
    return out
