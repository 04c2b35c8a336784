"""One typed settings object, loaded from ``config/ovstream.toml`` and ``OVSTREAM_*``.

Keys may be written in the seed's camelCase (``baseUrl``) or in snake_case
(``base_url``). Environment variables win over the file; the file wins over
the defaults, each written once, on its field below, with its docstring (constants that are
not settings live in ``core.defaults``). Bad values fail at start with the key named.
Loading them from the file and the environment: ``core.config_load.load_settings``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core import defaults as d
from core import redis_layout
from core.config_models import QUOTA_KINDS, RpcCredential, TenantQuota
from core.config_names import (
    ConfigError,
    camel,
)
from core.redaction import Policy, RedactionMode, check_personal, custom_rules, policy

__all__ = ["SECRET_KEYS", "ConfigError", "RpcCredential", "Settings", "TenantQuota"]


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
        use_attribute_docstrings=True,  # each field's docstring is its meaning (the README's table)
    )

    # the seed's table
    base_url: str = Field("http://127.0.0.1:1933")
    """Where the OpenViking server listens."""
    ov_version_check: Literal["refuse", "warn"] = Field("refuse")
    """Against an OV of another minor release than the one ovstream speaks (core.ov.version):
    ``refuse`` to start, or ``warn`` once and go on."""
    agent_prefix: str = Field("")
    """Prefix joined to every resolved agent id as ``<prefix>_<agent>``; empty: none."""
    auto_capture: bool = Field(True)
    """afterTurn writes each turn to the OV session."""
    auto_recall: bool = Field(True)
    """assemble's transform-context call injects recalled memories."""
    commit_token_threshold: int = Field(20_000, ge=1)
    """pending_tokens at or above which capture enqueues a background commit."""
    commit_keep_recent_count: int = Field(10, ge=0)
    """Messages the server keeps active after a capture-triggered commit."""
    recall_limit: int = Field(6, ge=1, le=100)
    """Most memories auto-recall injects."""
    recall_score_threshold: float = Field(0.15, ge=0.0, le=1.0)
    """Memories scoring below this are not recalled."""
    recall_max_injected_chars: int = Field(4000, ge=1)
    """Most characters auto-recall injects in total."""
    recall_prefer_abstract: bool = Field(False)
    """Inject a memory's abstract instead of reading its full text."""
    recall_resources: bool = Field(False)
    """memory_recall also searches viking://resources."""
    bypass_session_patterns: Annotated[tuple[str, ...], NoDecode] = Field(())
    """Globs on the sessionKey (else sessionId) that skip OV entirely."""

    # identity and auth
    api_key: str | None = Field(None, repr=False)
    """OV user key (X-OpenViking-API-Key); unset: dev mode, with the ``account`` and ``user`` headers."""
    account: str = Field("default", min_length=1)
    """X-OpenViking-Account in dev mode (no API key)."""
    user: str = Field("default", min_length=1)
    """X-OpenViking-User in dev mode (no API key)."""
    user_api_keys: dict[str, str] = Field({}, repr=False)
    """Tenant label -> OV user key, for capture workers acting for several users."""

    # redis and streams
    redis_url: str = Field("redis://127.0.0.1:6379/0", repr=False)
    """Redis holding streams, queues and snapshots; ``fakeredis://`` embeds one in-process."""
    redis_ca_file: str | None = Field(None)
    """CA bundle verifying a ``rediss://`` server (default: the system's)."""
    redis_cert_file: str | None = Field(None)
    """Client certificate, for a Redis that requires one (``tls-auth-clients yes``)."""
    redis_key_file: str | None = Field(None)
    """The key of ``redis_cert_file``."""
    redis_cluster: bool = Field(False)
    """``redis_url`` names one node of a Redis Cluster: streams, session records and leases are
    spread over its masters by their ``{s<n>}`` hash tags (needs ``queue_redis_url``)."""
    redis_sentinels: Annotated[tuple[str, ...], NoDecode] = Field(())
    """``host:port`` of Redis Sentinels (a list, or comma separated in the environment): Redis is
    then the master they know as ``redis_master_name``, asked of them on every (re)connect, so
    a failover they run takes ovstream to the promoted replica. ``redis_url`` still gives the
    database, the password and TLS (``rediss://``); its host and port are not used. The RQ
    commit queue shares that master unless ``queue_redis_url`` names a Redis of its own."""
    redis_master_name: str = Field("mymaster", min_length=1)
    """The name the Sentinels monitor the master under (``sentinel monitor <name> ...``)."""
    queue_redis_url: str | None = Field(None, repr=False)
    """The Redis of the RQ commit queue (default: ``redis_url``). RQ does not speak Redis
    Cluster, so with ``redis_cluster`` the queue lives on a plain Redis of its own."""
    queue_redis_urls: Annotated[tuple[str, ...], NoDecode] = Field((), repr=False)
    """Several Redis for the RQ commit queue, when one is not enough (a list, or comma
    separated in the environment; instead of ``queue_redis_url``): a session's commits always
    go to the same one (by a hash of the session: core.queue_routing), a worker serves all of
    them unless ``ovstream worker --queue`` names some, and status, the console, KEDA's scaler
    and the sweep see them all. A Redis appended takes about 1/n of the sessions' next commits;
    a commit in flight is found on the queue it was put on, wherever the sweep looks."""
    publish_replicas: int = Field(0, ge=0, le=16)
    """Replicas that must hold a turn before a publish counts it delivered (Redis ``WAIT``); a
    turn they do not confirm within ``publish_replicas_timeout_ms`` is not acknowledged and is
    sent again (its event id makes a second copy harmless). 0: the master's reply is enough,
    and a master failing right after it can take the turn with it (README, High availability).
    The plugin's ``publishReplicas`` is the same setting on its side."""
    publish_replicas_timeout_ms: int = Field(1000, ge=1, le=60_000)
    """How long a publish waits for ``publish_replicas`` replicas."""
    key_prefix: str = Field("ovstream", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """Every Redis key ovstream writes starts with this."""
    shards: int = Field(4, ge=1, le=1024)
    """Number of turn streams; a session always lands on the same one."""
    consumer_group: str = Field("capture", min_length=1)
    """Consumer group the capture workers read in."""
    capture_batch: int = Field(100, ge=50, le=10_000)
    """Entries one XREADGROUP asks for."""
    capture_block_ms: int = Field(1000, ge=1)
    """XREADGROUP block time; kept below the socket timeout."""
    max_deliveries: int = Field(5, ge=1)
    """An entry failing more often than this goes to the dead-letter stream."""
    ov_batch_max: int = Field(100, ge=1, le=100)  # OV's own limit: core.ov.layout.BATCH_LIMIT
    """Most messages one call to the OV batch route carries."""
    dead_letter_max_age_s: int = Field(30 * 24 * 3600, ge=0)
    """A dead letter nobody replayed or dropped within this is dropped (as ``ovstream dlq drop``
    would: a parked session left with none is released) and counted; 0 keeps them for good.
    A month: a turn older than that is no part of a conversation anyone resumes."""
    dead_letter_maxlen: int = Field(100_000, ge=1)
    """Most dead letters one ``dlq replay --all`` reads. The stream is not capped by length: each
    entry is a turn kept for an operator (``ovstream status`` counts them) until it is handled
    or ``dead_letter_max_age_s`` passes."""

    # the capture worker
    capture_lease_ms: int = Field(10_000, ge=100)
    """How long a shard stays with a worker that stopped renewing its lease (the takeover
    delay after a crash); renewed every third of it."""
    capture_ov_concurrency: int = Field(32, ge=1)
    """Most OV calls one capture worker has in flight (over all its shards)."""
    capture_reads_per_round: int = Field(4, ge=1, le=100)
    """Full XREADGROUP batches one round may gather when a stream has a backlog."""
    capture_round_max_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    """Most bytes of turn events one round holds (besides ``capture_batch x capture_reads_per_round``
    entries): a backlog of the host's largest events (a whole transcript each) makes rounds of
    bounded work, so a round's CPU never outgrows the shard's lease."""
    capture_retry_backoff_max_s: float = Field(5.0, gt=0)
    """Longest wait before a failed entry is tried again (the first wait is ``ov_backoff_s``, doubling)."""
    capture_settle_recheck_s: float = Field(1.0, ge=0)
    """An interrupted write is settled from OV's message count only when two reads this far apart
    agree: a write whose answer never came may still reach OV (a frozen OV applies the requests
    it holds when it wakes), and a count read before that would make capture write it again."""
    capture_ov_down_backoff_max_s: float = Field(30.0, gt=0)
    """Longest pause of a shard while OV is unavailable (the first is ``ov_backoff_s``, doubling)."""

    # commits and phase 2
    commit_queue: str = Field("ovstream-commits", min_length=1)
    """RQ queue for commit and poll jobs when ``commit_queue`` is set to nothing else; by default
    the queue is ``<key_prefix>`` + ``COMMIT_QUEUE_SUFFIX`` (the same name for the default prefix)."""
    commit_outcome_stream_maxlen: int = Field(10_000, ge=1)
    """Approximate cap of the commit-outcome stream (the per-session hash keeps every outcome)."""
    phase2_poll_interval_s: float = Field(0.8, gt=0)
    """Seconds between phase-2 task reads."""
    phase2_deadline_s: float = Field(300.0, gt=0)
    """A phase-2 task not finished after this is recorded as a timeout."""
    phase2_read_retries: int = Field(5, ge=0)
    """Consecutive failed task reads over which the poll interval keeps doubling. A read that
    fails never fails the commit (OV restarts take longer than a few reads): only OV saying
    ``failed`` does; reads go on until ``phase2_deadline_s``."""
    extraction_repairs_per_hour: int = Field(2, ge=0)
    """Most repairs of suspected lost extractions (workers.commits.repair) started per OV user
    and hour, each one more phase 2 (a model call) taking every suspect of the user waiting
    then; the others wait for the next. 0 turns the repairs off (suspects are still counted)."""
    compact_wait_s: float = Field(150.0, gt=0)
    """How long compact waits for phase 2. OpenClaw bounds a compaction at 180 s
    (``agents.defaults.compaction.timeoutSeconds``) and the plugin's call at 170 s,
    so compact answers first: when phase 2 is still running then, the archive is
    already done and compact says so (reason ``phase2_pending``); the poller
    goes on and records the commit's outcome."""

    # OV client
    ov_ca_file: str | None = Field(None)
    """CA bundle verifying an ``https://`` OV (default: the system's)."""
    ov_timeout_s: float = Field(30.0, gt=0)
    """Per-request timeout for OV calls (connecting, and every call but a message write)."""
    ov_write_timeout_s: float = Field(300.0, gt=0)
    """How long capture waits for OV to answer a message write. Long on purpose: a write given up
    on may still be applied when a frozen or overloaded OV gets to it, and then only the
    settle's second read (``capture_settle_recheck_s``) can tell; a write that waits knows."""
    ov_retries: int = Field(3, ge=0, le=10)
    """Retries for idempotent OV calls on 5xx and connection errors."""
    ov_backoff_s: float = Field(0.2, ge=0)
    """First retry delay; doubles each retry."""
    recall_timeout_s: float = Field(3.0, gt=0)
    """A recall search slower than this makes assemble pass through (within ``assemble_timeout_s``)."""
    assemble_timeout_s: float = Field(4.0, gt=0)
    """The most an assemble takes on any path: when OV (or Redis) is slower, the caller's own
    messages come back (passthrough) and a snapshot read in flight still finishes for the
    next call. Well under the plugin's 8 s (``rpcTimeoutMs``), so the plugin always gets an
    answer of ours instead of giving up."""
    missing_session_ttl_s: float = Field(3.0, ge=0)
    """How long assemble remembers that OV has no such session (a new conversation): calls
    in that time pass through without asking OV again. Capture's first snapshot ends it."""
    recall_turn_ttl_s: int = Field(900, ge=1)
    """How long the recall block of one user turn is kept: every model request of the
    turn (the host's tool loop) carries that block, found by one search."""
    overlay_stream_scan: int = Field(64, ge=0, le=10_000)
    """Newest stream entries of the session's shard that assemble reads to find turns
    published but not yet in its snapshot (other processes' turns; the plugin sends
    its own). Read only when the session's newest published turn (``Keys.last_turn``)
    is neither in the snapshot nor among the plugin's. 0: read none."""

    # snapshots
    snapshot_token_budget: int = Field(128_000, ge=1)
    """token_budget asked of OV /context when a snapshot is refreshed."""
    snapshot_ttl_s: int = Field(7 * 24 * 3600, ge=1)
    """Snapshots of idle sessions expire after this."""
    console_trace_ttl_s: int = Field(24 * 3600, ge=0)
    """How long the console's session inspector keeps what assemble last answered for a
    session and what its last recall found (message previews: a few KB a session); 0: none."""
    session_state_ttl_s: int = Field(14 * 24 * 3600, ge=60)
    """How long a session's capture and commit state (applied offset, commit records and
    counter) outlives its last turn or commit. Two weeks: twice the snapshot's week, so a
    session resumed after its snapshot went still finds it; long past any outage a plugin's
    spool bridges. A session idle longer comes back as new, and is handled exactly once all
    the same: its turns carry what is new in them, an import into a session OV already holds
    writes nothing, and its next commit takes a generation no earlier job id used. A parked
    session's state lives until an operator releases it (``ovstream dlq``)."""

    # rpc
    rpc_host: str = Field("127.0.0.1")
    """Where ``ovstream rpc`` listens."""
    rpc_port: int = Field(8787, ge=1, le=65535)
    """Port of ``ovstream rpc``."""
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    """Largest RPC request body (answered 413 before it is read) and largest turn event
    capture decodes (dead-lettered). A long real transcript (a 1M-token context, tool
    output and all) is a few MB of JSON; 32 MiB leaves room for inline images."""
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
    rpc_cache_bytes: int = Field(32 * 1024 * 1024, ge=1024 * 1024)
    """Most bytes one RPC process keeps of converted snapshots, finished answers, recall blocks
    and snapshot versions (least recently used go first; sizes as estimated on insert, above
    what they take): what lets assemble answer a session's repeated calls within a turn
    without converting. The default holds a few thousand short sessions or ~50 of 500
    messages, and keeps an RPC near 110 MiB however many sessions it serves (bench/soak.py);
    raise it for many long sessions talking at once through one process."""
    liveness_dir: str = Field("/tmp", min_length=1)
    """Where capture and worker processes touch a file every second, for ``ovstream health
    --probe live`` (workers.liveness): a writable directory (an emptyDir on Kubernetes). Each file
    names its deployment (key prefix and Redis), so deployments on one host may share it."""
    redaction: RedactionMode = Field("mask")
    """What a secret in a turn becomes before anything stores it (docs/PRIVACY.md): ``mask`` a
    typed placeholder (``<redacted:jwt#1>``), ``drop`` the message's content withheld, ``off``."""
    redaction_agents: dict[str, RedactionMode] = Field({})
    """Per-agent ``redaction`` (agent id -> mode), over the deployment's."""
    redaction_personal: Annotated[tuple[str, ...], NoDecode] = Field(())
    """Personal data kinds masked too (opt-in): ``email``, ``phone``, ``card_number``, ``iban``."""
    redaction_custom_patterns: tuple[dict[str, Any], ...] = Field(())
    """Secrets of the deployment's own kinds: each ``{kind, pattern, flags?, group?}`` (the
    regular expression syntax Python and JavaScript share), masked as ``<redacted:<kind>#n>``."""
    erase_settle_s: float = Field(3.0, ge=0)
    """The pause an erasure makes after its tombstone and between its two passes: longer than a
    capture worker takes to see the tombstone (1 s) and to end a round it began before."""
    erase_tombstone_ttl_s: int = Field(30 * 24 * 3600, ge=60)
    """How long an erased scope's turns are dropped unapplied after ``ovstream erase`` (a digest
    of the scope is all the tombstone keeps): longer than any plugin's spool holds a turn."""
    usage_keep_hours: int = Field(48, ge=1, le=24 * 90)
    """How long the hourly usage per tenant is kept (``GET /v1/usage``, ``ovstream usage``)."""
    usage_keep_days: int = Field(35, ge=1, le=3660)
    """How long the daily usage per tenant is kept (a month's bill, and the days around it)."""
    tenant_quotas: dict[str, TenantQuota] = Field({})
    """Per-tenant limits answered with 429 and ``Retry-After`` (core.config_models.TenantQuota):
    ``{"*": {...}}`` for every tenant without its own entry, ``"-"`` the service's own user."""
    usage_metrics_tenants: int = Field(10, ge=0, le=1000)
    """Tenants ``/metrics`` names in its usage series (the busiest); the rest are one series."""
    rpc_tls_cert_file: str | None = Field(None)
    """Serve the RPC over HTTPS with this certificate (and ``rpc_tls_key_file``)."""
    rpc_tls_key_file: str | None = Field(None)
    """The key of ``rpc_tls_cert_file``."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @field_validator("redis_url", "queue_redis_url")
    @classmethod
    def _redis_url(cls, v: str | None) -> str | None:
        return None if v is None else redis_layout.check_url(v)

    @field_validator("queue_redis_urls")
    @classmethod
    def _queue_redis_urls(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return redis_layout.check_queue_urls(v)

    @model_validator(mode="after")
    def _layout(self) -> Settings:
        redis_layout.check_layout(self)
        return self

    @field_validator("redaction_personal", "redaction_custom_patterns")
    @classmethod
    def _redaction(cls, v: tuple[Any, ...], info: Any) -> tuple[Any, ...]:
        check_personal(v) if info.field_name == "redaction_personal" else custom_rules(v)
        return v

    @field_validator(
        "bypass_session_patterns", "redis_sentinels", "redaction_personal", "queue_redis_urls", mode="before"
    )
    @classmethod
    def _patterns(cls, v: Any) -> Any:
        if isinstance(v, str):  # env var: comma separated
            return tuple(p.strip() for p in v.split(",") if p.strip())
        return v

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return redis_layout.check_sentinels(v)

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``redis_sentinels`` as (host, port) pairs."""
        return [(a.rpartition(":")[0], int(a.rpartition(":")[2])) for a in self.redis_sentinels]

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
    def queue_urls(self) -> tuple[str, ...]:
        """Every Redis of the RQ commit queue, in order (index ``i``: queue ``i``):
        ``queue_redis_urls``, else ``queue_redis_url``, else ``redis_url``."""
        return self.queue_redis_urls or (self.queue_redis_url or self.redis_url,)

    @property
    def rq_redis_url(self) -> str:
        """Where the (first) RQ commit queue lives."""
        return self.queue_urls[0]

    @property
    def credentials(self) -> dict[str, RpcCredential]:
        """Every RPC caller: ``rpc_credentials``, plus ``rpc_token`` as ``default``."""
        if self.rpc_token is None:
            return dict(self.rpc_credentials)
        return {"default": RpcCredential.model_validate({"token": self.rpc_token}), **self.rpc_credentials}

    def quota_for(self, tenant: str | None, kind: str) -> int | None:
        """``tenant``'s limit of ``kind`` (one of ``QUOTA_KINDS``) per its window; None: none."""
        quota = self.tenant_quotas.get(tenant or "-") or self.tenant_quotas.get("*")
        return None if quota is None else getattr(quota, QUOTA_KINDS[kind][0])

    def redaction_for(self, agent_id: str | None) -> Policy:
        """The redaction of ``agent_id``'s turns (its ``redaction_agents`` mode, else ``redaction``)."""
        custom = tuple(tuple(sorted(c.items())) for c in self.redaction_custom_patterns)
        return policy(self.redaction_agents.get(agent_id or "", self.redaction), self.redaction_personal, custom)

    def redacted_redis_url(self, url: str | None = None) -> str:
        """``url`` (default ``redis_url``) without its credentials, for logs; the store behind
        Sentinels is named as they know it."""
        if self.redis_sentinels and (url is None or url == self.redis_url):
            return f"{self.redis_master_name} (Sentinels {','.join(self.redis_sentinels)})"
        scheme, sep, rest = (url or self.redis_url).partition("://")
        return scheme + sep + rest.rsplit("@", 1)[-1]
