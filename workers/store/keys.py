"""Redis key names, defined once.

Every key a session touches carries the session's shard as a Redis Cluster
hash tag (``{s3}``), so one session's stream entry, applied offset, snapshot
and commit records live in one slot and can be changed in one MULTI or script.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from core.config import Settings
from core.session import SessionAddress, scope_of, shard_of
from core.shard_map import StreamShard

__all__ = ["Keys", "SessionKeys", "scope_of", "session_keys", "shard_of"]

SNAPSHOT = "snapshot"
LAST_TURN = "last-turn"

SESSION_KEYS_CACHE_SIZE = 2048
"""Sessions whose keys stay derived in each process: ~1.5 KB each with ids of a usual length,
~3 MiB in all (ids are bounded: ``SESSION_ID_MAX``). Deriving them again costs microseconds;
the cache is for assemble's repeated calls within a turn."""


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """Every key of one session (``Keys.session``), all in the session's shard slot."""

    shard: int
    scope: str
    last_turn: str
    applied: str
    snapshot: str
    commits: str
    commit_generation: str
    commit_inflight: str
    commits_unannounced: str
    parked: str
    lineage: str
    assembled: str
    """String: what assemble last answered for the session (workers.store.traces)."""
    assembled_recall: str
    """String: what assemble's last recall call (transform-context) answered for the session."""
    imports: str
    """Hash with the session state's lifetime: an import's event id -> what capture did with it
    (workers.store.imports)."""
    recalled: str
    """String: the session's last recall search and its memories (workers.store.traces)."""
    recall_prefix: str

    def recall_turn(self, turn: str) -> str:
        """String: the recall block of one user turn (core.turns.recall_turn_key); "" for none."""
        return f"{self.recall_prefix}:{turn}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder bound to one prefix (``Settings.key_prefix``)."""

    prefix: str = "ovstream"

    def session(self, address: SessionAddress, shards: int) -> SessionKeys:
        """The keys of ``address``'s session: the one place they are derived from an address
        (remembered for the most recent sessions: assemble asks on every call)."""
        return _session_keys(self, address, shards)

    def _derive(self, address: SessionAddress, shards: int) -> SessionKeys:
        shard, scope, sid = address.shard(shards), address.scope, address.ov_session_id
        return SessionKeys(
            shard=shard,
            scope=scope,
            last_turn=self.last_turn(shard, sid),
            applied=self.applied(shard, scope, sid),
            snapshot=self.snapshot(shard, scope, sid),
            commits=self.commits(shard, scope, sid),
            commit_generation=self.commit_generation(shard, scope, sid),
            commit_inflight=self.commit_inflight(shard, scope, sid),
            commits_unannounced=self.commits_unannounced(shard, scope, sid),
            parked=self.parked(shard, scope, sid),
            lineage=self.lineage(shard, scope, sid),
            assembled=self._session("assembled", shard, scope, sid),
            assembled_recall=self._session("assembled-recall", shard, scope, sid),
            imports=self._session("imports", shard, scope, sid),
            recalled=self._session("recalled", shard, scope, sid),
            recall_prefix=self._session("recall", shard, scope, sid),
        )

    def _of_stream(self, shard: int | StreamShard, name: str) -> str:
        """A key of one turn stream, in its tag's slot. Generation 0 (an int: a deployment never
        resharded) keeps the first layout's names; later ones carry their generation."""
        if isinstance(shard, int):
            return f"{self.prefix}:{{s{shard}}}:{name}"
        if shard.generation == 0:
            return f"{self.prefix}:{{s{shard.number}}}:{name}"
        return f"{self.prefix}:{{s{shard.tag}}}:{name}:g{shard.generation}.{shard.number}"

    def stream(self, shard: int | StreamShard) -> str:
        """Turn events of one shard (a Redis stream)."""
        return self._of_stream(shard, "turns")

    def tag_generation(self, tag: int) -> str:
        """String: the generation whose streams take the publishes of this tag's sessions
        (absent: 0). The publish script checks it, so a closed stream gets nothing new."""
        return f"{self.prefix}:{{s{tag}}}:generation"

    def retired(self, tag: int, generation: int) -> str:
        """Set: the shard numbers of ``generation`` with this tag that are retired (closed,
        read to the end, nothing pending): the next generation's streams of the tag wait for them."""
        return f"{self.prefix}:{{s{tag}}}:retired:g{generation}"

    def last_turn(self, shard: int, ov_session_id: str) -> str:
        """String: the event_id of the newest turn published for the session, by any
        process (the publisher sets it with the XADD), so assemble reads the stream
        only when the session has a turn it does not know of."""
        return f"{self._kind(LAST_TURN, shard)}{ov_session_id}"

    def deployment(self) -> str:
        """Hash: what every process of the deployment must agree on (``shards``), recorded by
        the first to start (workers.store.deployment)."""
        return f"{self.prefix}:deployment"

    def dead_letters(self) -> str:
        """Dead-letter stream: entries that could not be handled, with the reason."""
        return f"{self.prefix}:dlq"

    def dead_letters_expired(self) -> str:
        """Counter: dead letters dropped unhandled past ``deadLetterMaxAgeS``."""
        return f"{self.prefix}:dlq-expired"

    def dead_letter_expiry(self) -> str:
        """String with a TTL: the process whose turn it is to expire old dead letters."""
        return f"{self.prefix}:dlq-expiry"

    def commit_outcomes(self) -> str:
        """Stream of every commit outcome (completed / failed / timeout / skipped)."""
        return f"{self.prefix}:commit-outcomes"

    def _kind(self, kind: str, shard: int) -> str:
        """The start every key of ``kind`` of the shard's sessions has."""
        return f"{self.prefix}:{{s{shard}}}:{kind}:"

    def _session(self, kind: str, shard: int, scope: str, ov_session_id: str) -> str:
        return f"{self._kind(kind, shard)}{scope}:{ov_session_id}"

    def version_prefixes(self, tags: int) -> list[str]:
        """Where every snapshot and last-turn key starts: what assemble's version check reads
        (workers.store.versions has Redis say when any of them changes)."""
        return [self._kind(kind, tag) for tag in range(tags) for kind in (SNAPSHOT, LAST_TURN)]

    def applied(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: the last stream id applied to OV for this session, and bookkeeping."""
        return self._session("applied", shard, scope, ov_session_id)

    def parked(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: while the session is parked behind a dead letter, its dead-lettered entries,
        stream entry id -> dead-letter id (workers.capture.parking)."""
        return self._session("parked", shard, scope, ov_session_id)

    def lineage(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: a subagent session's parent and how it was spawned, and for a fork the
        parent's snapshot as it was then (workers.store.lineage)."""
        return self._session("lineage", shard, scope, ov_session_id)

    def snapshot(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: ``data`` = the session's ContextSnapshot (msgspec JSON), ``id`` = its
        applied stream id and ``fetched_ms`` = when its OV read began (for the no-regress check)."""
        return self._session(SNAPSHOT, shard, scope, ov_session_id)

    def commits(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: commit_id -> CommitOutcome JSON, the record of truth for that session."""
        return self._session("commits", shard, scope, ov_session_id)

    def session_glob(self, kind: str, shard: int, ov_session_id: str) -> str:
        """A SCAN glob over the ``kind`` keys (``commits``, ``applied``, ``assembled``) of one
        OV session under every scope: each agent and tenant that has one."""
        return f"{glob_escape(self._kind(kind, shard))}*:{glob_escape(ov_session_id)}"

    def scope_in(self, kind: str, key: str, shard: int, ov_session_id: str) -> str:
        """The scope in a ``kind`` key of ``ov_session_id`` (a ``session_glob`` match)."""
        return key[len(self._kind(kind, shard)) : -len(ov_session_id) - 1]

    def recent_sessions(self, tenant: str | None) -> str:
        """Sorted set with the console trace's lifetime: a tenant's sessions assemble answered
        most recently (member: the session's address and key, score: when), the console's list
        (workers.store.recent)."""
        return f"{self.prefix}:recent-sessions:{tenant or '-'}"

    def recent_tenants(self) -> str:
        """Set with the console trace's lifetime: the tenants with a ``recent_sessions`` list."""
        return f"{self.prefix}:recent-tenants"

    def commit_generation(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Counter naming the session's current commit generation."""
        return self._session("commit-gen", shard, scope, ov_session_id)

    def commit_inflight(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: ``req`` = the session's in-flight CommitRequest, ``job`` = the RQ job carrying it.
        ``job`` is ``phase2-due`` while its phase 2 is read from ``phase2_due()``, with the
        read's state in ``poll`` (workers.commits.phase2_due)."""
        return self._session("commit-inflight", shard, scope, ov_session_id)

    def commits_unannounced(self, shard: int, scope: str, ov_session_id: str) -> str:
        """Hash: commit_id -> a final CommitOutcome recorded (``commits``, in the same MULTI) and
        not yet appended to ``commit_outcomes()`` (a different slot): a sweep appends what a
        recorder that stopped in between left (workers.commits.records)."""
        return self._session("commits-unannounced", shard, scope, ov_session_id)

    def unannounced_index(self) -> str:
        """Sorted set: every session's ``commits_unannounced`` key -> when a sweep may next look."""
        return f"{self.prefix}:commits-unannounced"

    def lineage_ref(self, ov_session_id: str) -> str:
        """String with the session state's lifetime: where the lineage of the subagent session
        ``ov_session_id`` is kept (``lineage``, under its session key), so that its id alone
        finds it (``ovstream commits <id>``)."""
        return f"{self.prefix}:lineage-ref:{ov_session_id}"

    def extraction_repair(self, commit_id: str) -> str:
        """String with the session state's lifetime: the commit repairing ``commit_id``'s lost
        extraction (workers.commits.repair): once per archive."""
        return f"{self.prefix}:extraction-repair:{commit_id}"

    def extraction_repair_turn(self, tenant: str) -> str:
        """String with a TTL: the request of the tenant's repair commit running now (its
        repairs go one at a time)."""
        return f"{self.prefix}:extraction-repair-turn:{tenant}"

    def extraction_suspects(self, tenant: str) -> str:
        """Hash with the session state's lifetime: the tenant's suspected lost extractions
        waiting for a repair (workers.commits.repair_pool): commit id -> the suspect."""
        return f"{self.prefix}:extraction-suspects:{tenant}"

    def extraction_suspect_tenants(self) -> str:
        """Set: the tenants with suspected lost extractions waiting (``extraction_suspects``)."""
        return f"{self.prefix}:extraction-suspect-tenants"

    def extraction_repair_starts(self, tenant: str) -> str:
        """Sorted set with an hour's TTL: the tenant's repair commits -> when each started
        (``extraction_repairs_per_hour``)."""
        return f"{self.prefix}:extraction-repair-starts:{tenant}"

    def extraction_repair_pool(self, repair_session_id: str) -> str:
        """String with the session state's lifetime: the commit ids whose extractions the
        repair session ``repair_session_id`` repairs, fixed before it is written."""
        return f"{self.prefix}:extraction-repair-pool:{repair_session_id}"

    def extraction_repairs_started(self) -> str:
        """Counter: repair commits started (``ovstream_extraction_repairs_started_total``)."""
        return f"{self.prefix}:extraction-repairs-started"

    def redactions(self) -> str:
        """Hash: values capture wrote to OV masked, by tenant and kind (``tenant|kind`` -> count)."""
        return f"{self.prefix}:redactions"

    def erased_scopes(self) -> str:
        """Hash: an erased scope's digest (core.erasure.scope_digest) -> until when its tombstone
        stands (epoch seconds): capture drops the scope's turns unapplied until then."""
        return f"{self.prefix}:erased-scopes"

    def erasure(self, digest: str) -> str:
        """Hash with the tombstone's lifetime: an erasure's progress and counts (a rerun after a
        crash goes on from them), by its scope's digest; no user id, no content."""
        return f"{self.prefix}:erasure:{digest}"

    def erasures(self) -> str:
        """Stream (capped): the audit of erasures: when, the scope's kind and digest, who asked,
        what was removed per store (counts); no user id, no content."""
        return f"{self.prefix}:erasures"

    def extraction_loss(self, repair_commit_id: str) -> str:
        """String with the session state's lifetime: set once the repair commit
        ``repair_commit_id`` wrote memories, so its extraction loss is counted once."""
        return f"{self.prefix}:extraction-loss:{repair_commit_id}"

    def extractions_lost(self) -> str:
        """Counter: extractions found lost, the loss shown by their repair writing memories
        (``ovstream_extractions_lost_total``). Named anew after 0.3.0: 0.2.0 counted every
        suspicion under ``extractions-lost``, and a deployment upgraded from it read those as
        losses (the old key is left to expire with nothing reading it)."""
        return f"{self.prefix}:extractions-lost-repaired"

    def extraction_repairs(self) -> str:
        """Stream (capped): each extraction that may be lost and the commit re-running it alone."""
        return f"{self.prefix}:extraction-repairs"

    def phase2_due(self) -> str:
        """Sorted set: the in-flight key (``commit_inflight``) of each commit whose phase 2 is
        read next -> when that read is due, or when a poller's claim on it lapses
        (workers.commits.phase2_due)."""
        return f"{self.prefix}:phase2-due"

    def commits_in_flight(self) -> str:
        """Sorted set: every session's in-flight key (``commit_inflight``) -> when it is next
        looked at by a worker's sweep (workers.commits.sweep)."""
        return f"{self.prefix}:commits-in-flight"

    def usage(self, period: str, bucket: str) -> str:
        """Hash: ``tenant|count`` -> how many, in one hour's or day's bucket (core.usage).
        Added to by every process's flush of its tally (workers.store.usage); expires after the keep."""
        return f"{self.prefix}:usage:{period}:{bucket}"

    def quota(self, kind: str, tenant: str, window: int) -> str:
        """Counter: a tenant's ``kind`` calls in one quota window (workers.rpc.quotas).
        ``window`` is the unix time over the window's length; it expires with the window."""
        return f"{self.prefix}:quota:{kind}:{tenant}:{window}"

    def commit_lines(self) -> str:
        """Sorted set, on the queue's Redis: each commit line in use -> its last push (unix s).
        A line is a tenant's urgent or background jobs (core.fairness, workers.commits.lines)."""
        return f"{self.prefix}:commit-lines"

    def commit_line(self, line: str) -> str:
        """List, on the queue's Redis: the ids of the commit jobs waiting in ``line``, in order.
        RQ's queue list, one per line; the legacy line is RQ's own ``rq:queue:<name>``."""
        return f"{self.prefix}:commit-line:{line}"

    def commit_doorbell(self) -> str:
        """List, on the queue's Redis: a ring per push onto a commit line (a few kept).
        A blocked commit worker that pops one reads the lines again."""
        return f"{self.prefix}:commit-doorbell"

    def commit_worker(self, name: str) -> str:
        """String with a short TTL: the commit worker ``name`` (RQ's worker name) is alive;
        beaten by its due-job thread, so a job it was running when it died is seen orphaned."""
        return f"{self.prefix}:commit-worker:{name}"

    def capture_lease(self, shard: int | StreamShard) -> str:
        """Lease (workers.store.scripts.LEASE_*): the capture consumer owning a shard right now,
        renewed while it is alive."""
        return self._of_stream(shard, "lease:capture")

    def capture_lease_epoch(self, shard: int | StreamShard) -> str:
        """Counter: how many times the shard's lease was taken. A consumer whose lease lapsed
        takes it back only while this still names its own taking (workers.store.lua.HOLDS)."""
        return self._of_stream(shard, "lease:capture:epoch")

    def capture_failures(self, shard: int | StreamShard) -> str:
        """Hash: entry id -> how many times applying that entry of the shard's stream raised an
        error (only those count toward ``maxDeliveries``; a re-claim after a lost lease, a
        restart or a takeover does not). A field goes when its entry is acked or dead-lettered."""
        return self._of_stream(shard, "failures")

    def every_key(self) -> str:
        """A SCAN pattern matching every key of this deployment (and no other prefix's)."""
        return f"{glob_escape(self.prefix)}:*"

    def family_of(self, key: str) -> str | None:
        """The family of one of this deployment's keys: its kind (``applied``, ``snapshot``,
        ``turns``, ``lease:capture``, ...) without shard tag, session or generation; None for
        a key that is not this deployment's."""
        if not key.startswith(self.prefix + ":"):
            return None
        rest = key[len(self.prefix) + 1 :]
        if rest.startswith("{"):  # a shard's hash tag
            rest = rest.partition("}:")[2]
        head, _, tail = rest.partition(":")
        if head == "lease":
            return f"lease:{tail.partition(':')[0]}"
        return head or None

    def process_health(self, name: str) -> str:
        """Hash with a TTL: the liveness record of one ovstream process (workers.store.health)."""
        return f"{self.prefix}:health:{name}"

    def processes(self) -> str:
        """Sorted set: process name -> last beat (ms), the index of the health records."""
        return f"{self.prefix}:processes"

    def lag_history(self) -> str:
        """Hash: sample time (ms, a multiple of the interval) -> every shard's backlog then, the
        console's lag chart (workers.store.lag_history)."""
        return f"{self.prefix}:lag-history"

    def capture_workers(self) -> str:
        """Sorted set: live capture consumer -> lease expiry (ms), to split shards fairly."""
        return f"{self.prefix}:capture-workers"


def glob_escape(value: str) -> str:
    """``value`` matched literally by a Redis glob."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in value)


@lru_cache(maxsize=SESSION_KEYS_CACHE_SIZE)
def _session_keys(keys: Keys, address: SessionAddress, shards: int) -> SessionKeys:
    return keys._derive(address, shards)


def session_keys(settings: Settings, address: SessionAddress) -> SessionKeys:
    """The keys of ``address``'s session in the deployment ``settings`` describe."""
    return Keys(settings.key_prefix).session(address, settings.shards)
