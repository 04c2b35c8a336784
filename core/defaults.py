"""ovstream's constants that are not settings, each with why it has its value.

A setting's default (the seed's config table, and every other key an operator may set)
is written once, on its field in ``core.config.Settings``; what is here is fixed in code:
budgets' ratios, cache sizes, intervals and limits nobody needs to tune.
"""

# --- identity ------------------------------------------------------------------

DEFAULT_AGENT_ID = "main"
"""Agent id when neither the sessionKey nor the runtime context names one."""

# --- token budget ----------------------------------------------------------------

DEFAULT_TOKEN_BUDGET = 128_000
"""Budget assumed when a request gives none or a non-positive one."""

RESERVED_RATIO = 0.15
"""Share of the budget reserved for the model's output."""

RESERVED_MIN_TOKENS = 20_000
"""The reserve is at least this (never more than the budget)."""

ARCHIVE_RATIO = 0.15
"""Share of what remains after the reserve given to the archive summary."""

ARCHIVE_MAX_TOKENS = 8_000
"""The archive summary never gets more than this."""

RECALL_QUERY_MAX_CHARS = 4000
"""prepareRecallQuery cuts the query to this many characters."""

RECALL_QUERY_MIN_CHARS = 5
"""A prepared query shorter than this is not searched."""

# --- Redis and streams -----------------------------------------------------------

REDIS_WAIT_S = 0.5
REDIS_WAIT_MAX_S = 1.0
"""A process that starts (or finds itself) without Redis waits for it, trying again after
REDIS_WAIT_S, doubling up to REDIS_WAIT_MAX_S: start order does not matter, and a PING a
second resumes every process within a second or so of Redis answering again."""

STREAM_TRIM_INTERVAL_S = 1.0
"""How often (at most) a capture consumer trims its shard's stream of the entries every
group has applied (workers.store.scripts.TRIM_APPLIED). Nothing else trims a turn stream."""

REDIS_POOL_SIZE = 64
"""Connections one Redis client of a process keeps at most (per node of a cluster), unless its
role sizes it (capture: ``workers.capture.worker.redis_connections``). A caller finding them
all busy waits for one (``REDIS_POOL_WAIT_S``): an exhausted pool is a queue, not Redis away."""
REDIS_POOL_WAIT_S = 30.0
"""Longest wait for a free pooled connection (the RPC's fail-fast clients wait
``REDIS_FAIL_FAST_TIMEOUT_S``): past it the call fails as Redis being unreachable."""
REDIS_POOL_PER_SHARD = 4
"""Connections a capture worker keeps per stream it may hold: its blocking read, its round's
scripts and pipelines, its trim."""

OWN_PENDING_LOOK_S = 5.0
"""How often an idle capture consumer looks for entries pending for it that it does not hold."""
OWN_PENDING_IDLE_S = 10.0
"""How long such an entry has gone undelivered before it is taken back: longer than a round's
OV write takes to show in OV's count (what settles a write whose ack was lost)."""

STOP_GRACE_S = 5.0
"""A process asked to stop (SIGTERM) finishes its work in progress and releases what it holds
for at most this long; with Redis or OV away it gives up the rest (its leases lapse, its
unacknowledged entries are read again by the next owner: nothing is lost), so that it exits
well within systemd's TimeoutStopSec and Kubernetes' grace period (60 s)."""

REDIS_CONFIRM_S = 1.0
"""A Redis reply that timed out is confirmed by a PING answered within this before it is said
to be an outage (a process paused past its socket timeout finds Redis well)."""

REDIS_SOCKET_TIMEOUT_MARGIN_S = 10.0
"""Socket timeout over the longest blocking read a connection declares (XREADGROUP BLOCK)."""
REDIS_FAIL_FAST_CONNECT_TIMEOUT_S = 1.0
REDIS_FAIL_FAST_TIMEOUT_S = 2.0
"""Connect and command timeouts of the RPC's Redis clients: it only runs short commands, and a
slow Redis must not hold requests up (assemble falls back to the messages it was given)."""

# --- the capture worker -------------------------------------------------------------

CAPTURE_TICK_MAX_S = 0.5
"""Longest gap between a capture worker's looks at the shard split: a worker that stops
cleanly releases its leases at once, and the others take its shards at their next look."""

CAPTURE_CPU_SLICE_S = 0.01
"""Longest a shard consumer computes (decoding, converting, planning, encoding) before it lets
the event loop run: the lease renewals of every shard of the process run between slices."""

CAPTURE_OV_SCOUT_S = 0.25
"""While OV fails, one shard of each capture worker tries again this often (the scout), and
the worker asks OV's ``/health`` as often: every shard resumes within a second or two of OV
answering again (workers.capture.ov_watch)."""

CAPTURE_OV_PROBE_S = 10.0
"""How often a capture worker asks OV's /health between turns: OV away says so in its log,
``ovstream status`` and ``ovstream health`` before a turn finds out."""
CAPTURE_OV_PROBE_TIMEOUT_S = 3.0
"""How long that probe waits for OV's answer before calling it unreachable."""

CAPTURE_RESTART_BACKOFF_S = 0.5
"""Wait before a crashed shard consumer is started again; doubles with each crash in a row."""

CAPTURE_RESTART_BACKOFF_MAX_S = 30.0
"""Longest wait before a crashed shard consumer is started again."""

CAPTURE_ADVANCEMENTS_KEPT = 256
"""commitTurn advancement keys remembered per session (a re-sent commitTurn arrives soon after)."""

CAPTURE_EVENT_IDS_KEPT = 256
"""Event ids remembered per session, to drop an event the publisher re-sent after a lost XADD reply."""

# --- commits and phase 2 -----------------------------------------------------------

COMMIT_QUEUE_SUFFIX = "-commits"
"""Appended to ``key_prefix`` to name the commit queue unless ``commit_queue`` is set."""

COMMIT_RETRY_INTERVALS_S: tuple[int, ...] = (1, 5, 15)
"""RQ's retries of a commit job whose OV call found OV down (the commit never got through):
one retry per entry, waiting that many seconds."""

FOLLOW_UP_RETRY_INTERVALS_S: tuple[int, ...] = (2, 10, 30)
"""RQ's retries of a job scheduled after a commit's phase 1 (its phase-2 polls, rechecks and
extraction checks) that failed all the same: a Redis blip longer than the job's own patience
(``workers.commits.run.REDIS_PATIENCE_S``), a cluster failover. One retry per entry; a job
that fails them all stays in RQ's failed registry: ``ovstream status``, ``/metrics``
(``ovstream_commit_jobs{state="failed"}``) and its alert."""

PHASE2_READ_BACKOFF_MAX_S = 15.0
"""Longest wait between two phase-2 reads while reads fail."""

PHASE2_RECHECK_DELAYS_S: tuple[float, ...] = (30.0, 120.0, 600.0, 3600.0)
"""After a ``timeout`` outcome the task is read again after each of these delays; a final
state OV reports then replaces the timeout (the record ends matching OV's task)."""

# --- snapshots -------------------------------------------------------------------------

LAST_TURN_TTL_S = 7 * 24 * 3600
"""How long the marker of a session's newest published turn is kept (as snapshots)."""

# --- ovstream up ----------------------------------------------------------------------------

UP_JOB_THREAD_JOIN_S = 10.0
"""How long ``ovstream up``'s shutdown waits for a commit job in progress."""

# --- plugins (workers.rpc.plugins) ---------------------------------------------------------------

MIN_PLUGIN_VERSION = "0.1.0"
"""The oldest OpenClaw plugin release the RPC serves; an older one is answered 426 with what to
do. Raised only with a release whose service cannot serve that plugin (docs/UPGRADING.md)."""
PLUGIN_SEEN_S = 600.0
"""A plugin version heard within this is one that talks to the deployment (``ovstream status``)."""
PLUGIN_VERSIONS_KEPT = 16
"""Most plugin versions one RPC process remembers (whatever its callers send)."""
