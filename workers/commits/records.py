"""Commit records: each session's outcomes (the record of truth) and in-flight slot.

``Keys.commits`` maps commit_id -> CommitOutcome JSON; the first final outcome
(completed / failed / timeout / skipped) wins and ends the session's in-flight
slot (``Keys.commit_inflight``); every final outcome is also appended to
``Keys.commit_outcomes()`` for whoever follows commits as a stream.

The stream lives in another slot than the session's keys, so the append cannot share the
record's MULTI. The MULTI also files the outcome under ``Keys.commits_unannounced``, and the
append takes it out again; a recorder stopped in between leaves it there, indexed, and the
commit workers' sweep appends it (``announce_left``): an outcome reaches the stream at least
once, twice only when a recorder stops between its append and the take-out (or stalls there
for longer than ``ANNOUNCE_GRACE_S``).
"""

from __future__ import annotations

import builtins
import logging
import time
from typing import Any, TypeVar

import msgspec
import redis as redis_lib
import redis.asyncio as aioredis

from core.config import Settings
from core.events import CommitOutcome, CommitRequest, CommitStatus, EventDecodeError, decode, encode
from core.session import SessionAddress
from workers.commits.looks import SWEEP_INTERVAL_S, look_in
from workers.store.connection import stream_entries, text
from workers.store.in_order import InOrder
from workers.store.keys import Keys, SessionKeys
from workers.store.recent import addresses_by_keys
from workers.store.scripts import CLAIM_STALE, DROP_IF_SCORE, RECORD_OUTCOME
from workers.store.usage import TALLY

log = logging.getLogger(__name__)
_E = TypeVar("_E", bound=msgspec.Struct)

FINAL_STATUSES = frozenset({"completed", "failed", "timeout", "skipped"})
ANNOUNCE_GRACE_S = 10.0
"""How long a final outcome may sit unannounced before a sweep appends it for its recorder."""
ANNOUNCE_BATCH = 200
"""Most sessions one sweep announces for (the rest on the next)."""
OUTCOME_FIELD = "o"
"""Field of a ``Keys.commit_outcomes()`` entry holding the outcome JSON."""
FOLLOW_REASON = "follow_reason"
FOLLOW_KEEP = "follow_keep"
"""In-flight hash fields: a commit owed after this one (``workers.commits.request.request_commit``
joined a commit whose phase 1 had already begun, for a reason that must take every message
written so far). A final outcome then leaves the slot in place for the sweep to start it."""


def outcome_of(request: CommitRequest, status: CommitStatus, **fields: Any) -> CommitOutcome:
    """An outcome of ``request`` with ``status`` (the request's identity carried over)."""
    return CommitOutcome(
        commit_id=request.commit_id,
        ov_session_id=request.ov_session_id,
        agent_id=request.agent_id,
        user=request.user,
        reason=request.reason,
        status=status,
        requested_at=request.requested_at,
        **fields,
    )


def reached(outcome: CommitOutcome) -> dict[str, Any]:
    """What a commit had reached (its phase-2 task, its archive), carried into a later outcome."""
    return {"task_id": outcome.task_id, "archive_uri": outcome.archive_uri, "archived": outcome.archived}


def final_or_timeout(request: CommitRequest, outcome: CommitOutcome | None, waited_s: float) -> CommitOutcome:
    """What a wait for ``request`` answers: its final outcome, else a timeout outcome
    (not recorded: the commit goes on) carrying what it reached so far."""
    if outcome is not None and outcome.status in FINAL_STATUSES:
        return outcome
    base = outcome or outcome_of(request, "pending")
    return outcome_of(
        request,
        "timeout",
        **reached(base),
        finished_at=time.time(),
        error=f"no final outcome within {waited_s:g}s (still {base.status})",
    )


def _parsed(raw: bytes | str | None) -> CommitOutcome | None:
    return decode(raw, CommitOutcome) if raw is not None else None


def load_outcome(redis: Any, commits_key: str, commit_id: str) -> CommitOutcome | None:
    """One stored outcome; ``redis`` may be a pipeline in WATCH mode."""
    return _parsed(redis.hget(commits_key, commit_id))


def decoded(raw: bytes | None, kind: type[_E]) -> _E | None:
    """``raw`` decoded as ``kind``; None when it is absent or no ``kind`` (another release's)."""
    try:
        return decode(raw, kind) if raw is not None else None
    except EventDecodeError:
        return None


def in_flight_requests(redis: redis_lib.Redis, settings: Settings, limit: int) -> list[CommitRequest]:
    """The requests of the commits in flight (their slots named by ``Keys.commits_in_flight``),
    at most ``limit``, in one pipelined read; a slot gone or unreadable is left out."""
    slots = redis.zrange(Keys(settings.key_prefix).commits_in_flight(), 0, limit - 1)
    if not slots:
        return []
    pipe = redis.pipeline(transaction=False)
    for slot in slots:
        pipe.hget(text(slot), "req")
    return [r for r in (decoded(raw, CommitRequest) for raw in pipe.execute()) if r is not None]


def count_outcome(request: CommitRequest, outcome: CommitOutcome, *, corrects: str | None = None) -> None:
    """A final outcome in its tenant's usage (workers.store.usage); one that ``corrects`` an
    outcome counted before (a timeout OV finished later) moves that one's count over."""
    tenant = request.user
    if corrects is None:
        TALLY.add(tenant, "commits")
    elif corrects != "completed":
        TALLY.add(tenant, "commits_failed", -1)
    TALLY.add(tenant, "commits_completed" if outcome.status == "completed" else "commits_failed")
    TALLY.add(tenant, "memories_extracted", outcome.memories_extracted or 0)


class CommitRecords:
    """The commit records of one deployment (``Settings.key_prefix``), bound to a connection."""

    def __init__(self, redis: redis_lib.Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.key_prefix)

    def session_keys(self, address: SessionAddress) -> SessionKeys:
        return self.keys.session(address, self.settings.shards)

    def outcome(self, request: CommitRequest) -> CommitOutcome | None:
        """The recorded outcome of ``request`` (pending and running included), or None."""
        return load_outcome(self.redis, self.session_keys(request.address).commits, request.commit_id)

    def outcome_as_job_starts(self, request: CommitRequest) -> CommitOutcome | None:
        """``outcome``, read as the commit's job starts; with it (one round trip), the commit's
        entry in the sweep's index is made due ``SWEEP_INTERVAL_S`` from now: while it waited
        on its line it was looked at seldom, and a worker dying under a running job is found
        within seconds (workers.commits.looks)."""
        ks = self.session_keys(request.address)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(ks.commits, request.commit_id)
            look_in(pipe, self.settings, ks.commit_inflight, SWEEP_INTERVAL_S)
            raw, _ = pipe.execute()
        return _parsed(raw)

    async def outcome_async(self, aredis: aioredis.Redis, request: CommitRequest) -> CommitOutcome | None:
        """``outcome`` read through an asyncio client (the RPC's wait on its event loop)."""
        return _parsed(await aredis.hget(self.session_keys(request.address).commits, request.commit_id))

    def record(self, request: CommitRequest, outcome: CommitOutcome) -> bool:
        """Store ``outcome`` unless a final one is stored; a final one also ends the in-flight
        slot, unless a commit is owed after it (``FOLLOW_REASON``)."""
        ks = self.session_keys(request.address)
        final = outcome.status in FINAL_STATUSES
        steps = InOrder(self.redis)  # one round trip where Redis keeps the order (workers.store.in_order)
        indexed_at = time.time()
        if final:  # indexed before it is filed unannounced: where a sweep will find it
            steps.add(lambda client: self._index_unannounced(client, ks, indexed_at))
        steps.add(lambda client: self.queue_record(client, request, outcome))
        if not steps.run()[-1]:
            return False
        if final:
            self._announce(ks, outcome, indexed_at)
            count_outcome(request, outcome)
            log.info(
                "commit %s of session %s: %s%s",
                request.commit_id,
                request.ov_session_id,
                outcome.status,
                f" ({outcome.error})" if outcome.error else "",
                extra={"outcome": outcome.status, "session": request.ov_session_id, "commit_id": request.commit_id},
            )
        return True

    def queue_record(self, client: Any, request: CommitRequest, outcome: CommitOutcome) -> Any:
        """The record's script (``record``'s store) on ``client``: a client, or a pipeline that
        sends it with other writes in one round trip. Its answer: stored or not."""
        ks = self.session_keys(request.address)
        keys = [ks.commits, ks.commit_inflight, ks.commit_generation, ks.commits_unannounced]
        final = int(outcome.status in FINAL_STATUSES)
        # one script (the session's keys share a slot): WATCH and MULTI cost Redis 3 commands more
        args: list[Any] = [request.commit_id, encode(outcome), self.settings.session_state_ttl_s, final, FOLLOW_REASON]
        return RECORD_OUTCOME(client, keys, args)

    def correct_timeout(self, request: CommitRequest, outcome: CommitOutcome) -> bool:
        """Replace a recorded ``timeout`` by the final state OV reported later (a recheck);
        any other stored outcome stands. True when corrected."""
        ks = self.session_keys(request.address)
        indexed_at = time.time()
        self._index_unannounced(self.redis, ks, indexed_at)
        with self.redis.pipeline(transaction=True) as pipe:  # WATCH: the cluster client asks for it by name
            while True:
                try:
                    pipe.watch(ks.commits)
                    current = load_outcome(pipe, ks.commits, request.commit_id)
                    if current is None or current.status != "timeout":
                        pipe.reset()
                        return False
                    pipe.multi()
                    pipe.hset(ks.commits, request.commit_id, encode(outcome))
                    pipe.hset(ks.commits_unannounced, request.commit_id, encode(outcome))
                    pipe.execute()
                    break
                except redis_lib.WatchError:
                    continue
        self._announce(ks, outcome, indexed_at)
        count_outcome(request, outcome, corrects="timeout")
        log.info(
            "commit %s of session %s: timeout corrected to %s", request.commit_id, request.ov_session_id, outcome.status
        )
        return True

    def _index_unannounced(self, client: Any, ks: SessionKeys, at: float) -> Any:
        """Before a final outcome is filed as unannounced: where a sweep will find it (``at``)."""
        return client.zadd(self.keys.unannounced_index(), {ks.commits_unannounced: at})

    def _announce(self, ks: SessionKeys, outcome: CommitOutcome, indexed_at: float) -> None:
        """Append ``outcome`` to the outcome stream, then take it out of the unannounced ones;
        the session's entry in their index too when none is left there and nobody indexed it
        since (``indexed_at``): the sweep found it and took it out a little later, three round
        trips more a commit (``announce_left``)."""
        unannounced = ks.commits_unannounced
        if self._announce_raw(unannounced, outcome.commit_id, encode(outcome)) == 0:
            DROP_IF_SCORE(self.redis, [self.keys.unannounced_index()], [unannounced, indexed_at])

    def _announce_raw(self, unannounced: str, commit_id: str, encoded_outcome: bytes | str) -> int:
        """Append, then take out: in one round trip on one Redis. How many are left unannounced."""
        *_, left = (
            InOrder(self.redis)
            .add(
                lambda client: client.xadd(
                    self.keys.commit_outcomes(),
                    {OUTCOME_FIELD: encoded_outcome},
                    maxlen=self.settings.commit_outcome_stream_maxlen,
                    approximate=True,
                )
            )
            .add(lambda client: client.hdel(unannounced, commit_id))
            .add(lambda client: client.hlen(unannounced))
            .run()
        )
        return int(left)

    def announce_left(self, *, older_than_s: float = ANNOUNCE_GRACE_S, now: float | None = None) -> int:
        """Append the final outcomes recorders left unannounced (filed over ``older_than_s``
        ago, so a live recorder gets to its own append first); returns how many. Each
        session's entry is handed to one sweeping worker at a time (``CLAIM_STALE``)."""
        index = self.keys.unannounced_index()
        now = time.time() if now is None else now
        announced = 0
        for member in CLAIM_STALE(self.redis, [index], [now - older_than_s, now, ANNOUNCE_BATCH]):
            key = text(member)
            for commit_id, raw in self.redis.hgetall(key).items():
                try:
                    outcome = decode(raw, CommitOutcome)
                except EventDecodeError as exc:  # not ours: nothing could read it from the stream either
                    log.error("unannounced outcome %s in %s is not an outcome (%s); dropped", commit_id, key, exc)
                    self.redis.hdel(key, commit_id)
                    continue
                if (outcome.finished_at or 0.0) > now - older_than_s:
                    continue  # just recorded: its recorder is about to announce it
                log.warning(
                    "commit %s of session %s: its %s outcome was recorded but never announced "
                    "(its recorder stopped in between); appending it to the outcome stream now",
                    outcome.commit_id,
                    outcome.ov_session_id,
                    outcome.status,
                )
                self._announce_raw(key, outcome.commit_id, raw)
                announced += 1
            if not self.redis.exists(key):
                DROP_IF_SCORE(self.redis, [index], [key, now])
        return announced

    def list(self, address: SessionAddress) -> list[CommitOutcome]:
        """Every recorded commit of the session, oldest first."""
        raw = self.redis.hgetall(self.session_keys(address).commits)
        outcomes = [decode(v, CommitOutcome) for v in raw.values()]
        return sorted(outcomes, key=lambda o: (o.requested_at, o.commit_id))

    def addresses_of(self, ov_session_id: str) -> builtins.list[SessionAddress]:
        """Every agent and tenant with commits recorded for the OV session ``ov_session_id``
        (an operator who knows the session id but not the agent its key names)."""
        found = addresses_by_keys(self.redis, self.settings, ov_session_id, ("commits",))
        return sorted(found, key=lambda a: (a.tenant or "", a.agent_id))


class _OutcomeSummary(msgspec.Struct):
    """What the outcome stream's readers need of an outcome: the rest is not decoded."""

    status: str = "unknown"
    requested_at: float = 0.0
    finished_at: float | None = None

    @property
    def took_s(self) -> float | None:
        """Seconds from the request to the final outcome (None: not final, or not said)."""
        if self.finished_at is None or not self.requested_at:
            return None
        return max(0.0, self.finished_at - self.requested_at)


_status_decoder = msgspec.json.Decoder(_OutcomeSummary)
_OUTCOME_FIELDS = frozenset({OUTCOME_FIELD, "e"})
"""Outcome-stream fields holding an encoded CommitOutcome (``e``: what older versions wrote)."""


def outcome_status(fields: dict[Any, Any]) -> str:
    """The status of one commit-outcomes stream entry, reading only that field."""
    return _outcome_of(fields).status


def _outcome_of(fields: dict[Any, Any]) -> _OutcomeSummary:
    for name, value in fields.items():
        key = text(name)
        if key == "status":
            return _OutcomeSummary(text(value))
        if key in _OUTCOME_FIELDS:
            try:
                return _status_decoder.decode(value)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return _OutcomeSummary("unreadable")
    return _OutcomeSummary()


def outcome_statuses_after(
    redis: redis_lib.Redis, settings: Settings, after_id: str | None, count: int
) -> list[tuple[str, str, float | None]]:
    """Up to ``count`` entries of ``Keys.commit_outcomes()`` after ``after_id`` (None: from the
    oldest), as (entry id, outcome status, seconds from request to final outcome or None),
    oldest first."""
    start = f"({after_id}" if after_id else "-"
    entries = stream_entries(redis.xrange(Keys(settings.key_prefix).commit_outcomes(), min=start, count=count))
    return [(text(entry_id), o.status, o.took_s) for entry_id, o in ((i, _outcome_of(f)) for i, f in entries)]
