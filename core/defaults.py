"""Every default constant of ovstream, in one place.

The seed design's config table supplies the first block; the rest are ours
(Redis, queues, timeouts). ``core.config.Settings`` takes its defaults from
here, so a default is changed in exactly one spot.
"""

# --- the seed's config table -------------------------------------------------

BASE_URL = "http://127.0.0.1:1933"
"""Where the OpenViking server listens."""

AGENT_PREFIX = ""
"""Prefix joined to every resolved agent id as ``<prefix>_<agent>``; empty: none."""

AUTO_CAPTURE = True
"""afterTurn writes each turn to the OV session."""

AUTO_RECALL = True
"""assemble's transform-context call injects recalled memories."""

COMMIT_TOKEN_THRESHOLD = 20_000
"""pending_tokens at or above which capture enqueues a background commit."""

COMMIT_KEEP_RECENT_COUNT = 10
"""Messages the server keeps active after a capture-triggered commit."""

RECALL_LIMIT = 6
"""Most memories auto-recall injects."""

RECALL_SCORE_THRESHOLD = 0.15
"""Memories scoring below this are not recalled."""

RECALL_MAX_INJECTED_CHARS = 4000
"""Most characters auto-recall injects in total."""

RECALL_PREFER_ABSTRACT = False
"""Inject a memory's abstract instead of reading its full text."""

RECALL_RESOURCES = False
"""memory_recall also searches viking://resources."""

BYPASS_SESSION_PATTERNS: tuple[str, ...] = ()
"""Globs on the sessionKey (else sessionId) that skip OV entirely."""

# --- identity ------------------------------------------------------------------

DEFAULT_AGENT_ID = "main"
"""Agent id when neither the sessionKey nor the runtime context names one."""

OV_ACCOUNT = "default"
"""X-OpenViking-Account in dev mode (no API key)."""

OV_USER = "default"
"""X-OpenViking-User in dev mode (no API key)."""

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

REDIS_URL = "redis://127.0.0.1:6379/0"
"""Redis holding streams, queues and snapshots; ``fakeredis://`` embeds one in-process."""

KEY_PREFIX = "ovstream"
"""Every Redis key ovstream writes starts with this."""

SHARDS = 4
"""Number of turn streams; a session always lands on the same one."""

CONSUMER_GROUP = "capture"
"""Consumer group the capture workers read in."""

CAPTURE_BATCH = 100
"""Entries one XREADGROUP asks for."""

CAPTURE_BLOCK_MS = 1000
"""XREADGROUP block time; kept below the socket timeout."""

MAX_DELIVERIES = 5
"""An entry failing more often than this goes to the dead-letter stream."""

OV_BATCH_MAX = 100
"""Most messages one call to the OV batch route carries."""

REDIS_WAIT_S = 0.5
REDIS_WAIT_MAX_S = 10.0
"""A process that starts (or finds itself) without Redis waits for it, trying again after
REDIS_WAIT_S, doubling up to REDIS_WAIT_MAX_S: start order does not matter."""

STREAM_TRIM_INTERVAL_S = 1.0
"""How often (at most) a capture consumer trims its shard's stream of the entries every
group has applied (workers.store.scripts.TRIM_APPLIED). Nothing else trims a turn stream."""

DEAD_LETTER_MAXLEN = 100_000
"""Most dead letters one ``dlq replay --all`` reads. The dead-letter stream itself is never
capped: each entry is a turn kept for an operator (``ovstream status`` counts them)."""

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

REDIS_SOCKET_TIMEOUT_MARGIN_S = 10.0
"""Socket timeout over the longest blocking read a connection declares (XREADGROUP BLOCK)."""
REDIS_FAIL_FAST_CONNECT_TIMEOUT_S = 1.0
REDIS_FAIL_FAST_TIMEOUT_S = 2.0
"""Connect and command timeouts of the RPC's Redis clients: it only runs short commands, and a
slow Redis must not hold requests up (assemble falls back to the messages it was given)."""

# --- the capture worker -------------------------------------------------------------

CAPTURE_LEASE_MS = 10_000
"""How long a shard stays with a worker that stopped renewing its lease (the takeover
delay after a crash); renewed every third of it."""

CAPTURE_TICK_MAX_S = 0.5
"""Longest gap between a capture worker's looks at the shard split: a worker that stops
cleanly releases its leases at once, and the others take its shards at their next look."""

CAPTURE_OV_CONCURRENCY = 32
"""Most OV calls one capture worker has in flight (over all its shards)."""

CAPTURE_READS_PER_ROUND = 4
"""Full XREADGROUP batches one round may gather when a stream has a backlog."""

CAPTURE_ROUND_MAX_BYTES = 16 * 1024 * 1024
"""Most bytes of turn events one round holds (besides ``capture_batch x capture_reads_per_round``
entries): a backlog of the host's largest events (a whole transcript each) makes rounds of
bounded work, so a round's CPU never outgrows the shard's lease."""

CAPTURE_CPU_SLICE_S = 0.01
"""Longest a shard consumer computes (decoding, converting, planning, encoding) before it lets
the event loop run: the lease renewals of every shard of the process run between slices."""

CAPTURE_RETRY_BACKOFF_MAX_S = 5.0
"""Longest wait before a failed entry is tried again (the first wait is ``ov_backoff_s``, doubling)."""

CAPTURE_OV_DOWN_BACKOFF_MAX_S = 30.0
"""Longest pause of a shard while OV is unavailable (the first is ``ov_backoff_s``, doubling)."""

CAPTURE_OV_PROBE_S = 10.0
"""How often a capture worker asks OV's /health between turns: OV away says so in its log,
``ovstream status`` and ``ovstream health`` before a turn finds out."""
CAPTURE_OV_PROBE_TIMEOUT_S = 3.0
"""How long that probe waits for OV's answer before calling it unreachable."""

CAPTURE_SETTLE_RECHECK_S = 1.0
"""An interrupted write is settled from OV's message count only when two reads this far apart
agree: a write whose answer never came may still reach OV (a frozen OV applies the requests
it holds when it wakes), and a count read before that would make capture write it again."""

CAPTURE_RESTART_BACKOFF_S = 0.5
"""Wait before a crashed shard consumer is started again; doubles with each crash in a row."""

CAPTURE_RESTART_BACKOFF_MAX_S = 30.0
"""Longest wait before a crashed shard consumer is started again."""

CAPTURE_ADVANCEMENTS_KEPT = 256
"""commitTurn advancement keys remembered per session (a re-sent commitTurn arrives soon after)."""

CAPTURE_EVENT_IDS_KEPT = 256
"""Event ids remembered per session, to drop an event the publisher re-sent after a lost XADD reply."""

# --- commits and phase 2 -----------------------------------------------------------

COMMIT_QUEUE = "ovstream-commits"
"""RQ queue for commit and poll jobs when ``commit_queue`` is set to nothing else; by default
the queue is ``<key_prefix>`` + ``COMMIT_QUEUE_SUFFIX`` (the same name for the default prefix)."""

COMMIT_QUEUE_SUFFIX = "-commits"
"""Appended to ``key_prefix`` to name the commit queue unless ``commit_queue`` is set."""

COMMIT_RETRY_INTERVALS_S: tuple[int, ...] = (1, 5, 15)
"""RQ's retries of a commit job whose OV call found OV down (the commit never got through):
one retry per entry, waiting that many seconds."""

COMMIT_OUTCOME_STREAM_MAXLEN = 10_000
"""Approximate cap of the commit-outcome stream (the per-session hash keeps every outcome)."""

COMMIT_TENANT_WAIT_S = 2.0
"""A commit whose tenant already has a phase 2 running is scheduled again after this.
OV 0.5.2 loses the memories of overlapping phase 2s of one user, so they run one at a time."""

COMMIT_TENANT_LOCK_MARGIN_S = 60.0
"""The tenant's phase-2 lock lives ``phase2_deadline_s`` plus this, so a dead poller
cannot hold it for ever."""

PHASE2_POLL_INTERVAL_S = 0.8
"""Seconds between phase-2 task reads."""

PHASE2_DEADLINE_S = 300.0
"""A phase-2 task not finished after this is recorded as a timeout."""

PHASE2_READ_RETRIES = 5
"""Consecutive failed task reads over which the poll interval keeps doubling. A read that
fails never fails the commit (OV restarts take longer than a few reads): only OV saying
``failed`` does; reads go on until ``phase2_deadline_s``."""

PHASE2_READ_BACKOFF_MAX_S = 15.0
"""Longest wait between two phase-2 reads while reads fail."""

PHASE2_RECHECK_DELAYS_S: tuple[float, ...] = (30.0, 120.0, 600.0, 3600.0)
"""After a ``timeout`` outcome the task is read again after each of these delays; a final
state OV reports then replaces the timeout (the record ends matching OV's task)."""

COMPACT_WAIT_S = 150.0
"""How long compact waits for phase 2. OpenClaw bounds a compaction at 180 s
(``agents.defaults.compaction.timeoutSeconds``) and the plugin's call at 170 s,
so compact answers first: when phase 2 is still running then, the archive is
already done and compact says so (reason ``phase2_pending``); the poller
goes on and records the commit's outcome."""

# --- OV client -----------------------------------------------------------------------

OV_TIMEOUT_S = 30.0
"""Per-request timeout for OV calls (connecting, and every call but a message write)."""

OV_WRITE_TIMEOUT_S = 300.0
"""How long capture waits for OV to answer a message write. Long on purpose: a write given up
on may still be applied when a frozen or overloaded OV gets to it, and then only the
settle's second read (``CAPTURE_SETTLE_RECHECK_S``) can tell; a write that waits knows."""

OV_RETRIES = 3
"""Retries for idempotent OV calls on 5xx and connection errors."""

OV_BACKOFF_S = 0.2
"""First retry delay; doubles each retry."""

RECALL_TIMEOUT_S = 3.0
"""A recall search slower than this makes assemble pass through (within ``ASSEMBLE_TIMEOUT_S``)."""

ASSEMBLE_TIMEOUT_S = 4.0
"""The most an assemble takes on any path: when OV (or Redis) is slower, the caller's own
messages come back (passthrough) and a snapshot read in flight still finishes for the
next call. Well under the plugin's 8 s (``rpcTimeoutMs``), so the plugin always gets an
answer of ours instead of giving up."""

MISSING_SESSION_TTL_S = 3.0
"""How long assemble remembers that OV has no such session (a new conversation): calls
in that time pass through without asking OV again. Capture's first snapshot ends it."""

RECALL_TURN_TTL_S = 900
"""How long the recall block of one user turn is kept: every model request of the
turn (the host's tool loop) carries that block, found by one search."""

OVERLAY_STREAM_SCAN = 64
"""Newest stream entries of the session's shard that assemble reads to find turns
published but not yet in its snapshot (other processes' turns; the plugin sends
its own). Read only when the session's newest published turn (``Keys.last_turn``)
is neither in the snapshot nor among the plugin's. 0: read none."""

LAST_TURN_TTL_S = 7 * 24 * 3600
"""How long the marker of a session's newest published turn is kept (as snapshots)."""

# --- snapshots -------------------------------------------------------------------------

SNAPSHOT_TOKEN_BUDGET = 128_000
"""token_budget asked of OV /context when a snapshot is refreshed."""

SNAPSHOT_TTL_S = 7 * 24 * 3600
"""Snapshots of idle sessions expire after this."""

# --- ovstream up ----------------------------------------------------------------------------

UP_JOB_THREAD_JOIN_S = 10.0
"""How long ``ovstream up``'s shutdown waits for a commit job in progress."""

# --- RPC ---------------------------------------------------------------------------------

RPC_HOST = "127.0.0.1"
"""Where ``ovstream rpc`` listens."""

RPC_PORT = 8787
"""Port of ``ovstream rpc``."""

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest RPC request body (answered 413 before it is read) and largest turn event
capture decodes (dead-lettered). A long real transcript (a 1M-token context, tool
output and all) is a few MB of JSON; 32 MiB leaves room for inline images."""
