"""One round of a shard consumer: apply a batch of sessions to OV, exactly once.

Steps, each over every session of the round (sessions concurrently, each session's entries
strictly in stream order, merged into one OV batch write):

1. read the sessions' applied hashes (one pipeline);
2. plan the units (workers.capture.plan: what each writes, redacted); settle an intent left by a
   crash (OV's ``total_message_count``, two reads agreeing); learn the base total if uncached;
3. record each write's intent (one script);
4. write to OV (fault hook ``before_write`` / ``after_write`` around each);
5. fault hook ``before_ack``; one script moving ``last_id``, clearing the intents, marking each
   written session's snapshot behind (``SNAPSHOT_BEHIND``: assemble reads OV rather than serve
   an older snapshot), recording what became of imports (workers.capture.imports) and XACKing
   every finished entry; fault hook ``after_ack``;
6. count what it wrote masked (workers.capture.redacting); per written (or settled) session:
   request a commit when its pending tokens reach the threshold; refresh its snapshot (hooks
   ``before_snapshot`` per session and ``before_snapshot_store``; OV reads concurrently, one
   pipeline of reads and one of writes), which clears the mark.

Steps 3 and 5 are fenced by the shard's lease (workers.capture.fence): a consumer that lost it
writes neither an intent nor an ack. A crash anywhere leaves nothing written (intent or not), or
a write whose intent says exactly how much to skip on redelivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, cast

import redis.asyncio as aioredis

from core.config import Settings
from core.events import ContextSnapshot
from core.ov.client import OVClient, OVError, OVUnavailable
from core.ov.envelope import is_passing
from core.snapshot_growth import first_records, grown_records
from workers import logs
from workers.capture.erased import drop_erased
from workers.capture.failures import EntryFailures
from workers.capture.fence import KEEP, HashWrite, ShardFence
from workers.capture.imports import import_records
from workers.capture.parking import applied_letters, delete_letters, entries_of_parked
from workers.capture.plan import (
    Entry,
    LeaseLost,
    SessionRef,
    SessionRound,
    commit_markers,
    finish_state,
    plan_round,
)
from workers.capture.redacting import count_masked, count_usage
from workers.capture.services import CaptureServices
from workers.capture.settle import count_following_entries, lost_writes_intent, ov_total, settled_total
from workers.capture.slices import CpuSlice
from workers.store.applied import INTENT, PARKED, PARTIAL_ID, PARTIAL_SKIP, AppliedState
from workers.store.scripts import SNAPSHOT_BEHIND
from workers.store.snapshots import (
    grown_snapshot,
    parse_stored,
    snapshot_from,
    snapshot_key,
    store_snapshot,
    stored_snapshot,
)

log = logging.getLogger(__name__)


class RoundHost(Protocol):
    """The shard consumer running a round (``workers.capture.shard.ShardConsumer``)."""

    settings: Settings
    redis: aioredis.Redis
    worker: CaptureServices
    stream: str
    group: str
    fence: ShardFence
    failures: EntryFailures
    isolate: set[str]

    def check_lease(self) -> None:
        """Raise LeaseLost when the shard's lease went to another consumer."""

    async def record_failure(self, entry: Entry, error: BaseException) -> None:
        """Count a failed delivery of ``entry``; dead-letter it past the limit."""

    async def dead_letter(self, items: list[tuple[Entry, str, str]]) -> None:
        """Dead-letter ``items`` (entry, reason, error) and drop them from the backlog."""


@dataclass(slots=True)
class RoundOutcome:
    acked: list[Entry] = field(default_factory=list)
    isolate: set[str] = field(default_factory=set)
    unavailable: str | None = None


@dataclass(slots=True)
class _Run:
    plan: SessionRound
    ov: OVClient
    settings: Settings
    entries: list[Entry]
    isolate: bool
    unconfirmed: bool = False
    """Redis's record of the session may lack writes OV has (``settle.RecordedStates``)."""
    error: BaseException | None = None
    unavailable: OVUnavailable | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.unavailable is None


def _raise_kill(results: Sequence[object]) -> None:
    """Re-raise what must stop the worker (a simulated kill, cancellation) or the round (lost lease)."""
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result
    for result in results:
        if isinstance(result, LeaseLost):
            raise result


async def _guard(run: _Run, step: Callable[[], Awaitable[None]], slots: asyncio.Semaphore) -> None:
    """Run one session's step (bounded by ``slots``: OV calls, and the connections they hold);
    OV's answer becomes the run's outcome instead of an exception."""
    try:
        async with slots:
            with logs.fields(session=run.plan.session.ov_session_id):
                await step()
    except OVUnavailable as exc:
        run.unavailable = exc
    except OVError as exc:
        run.error = exc
    except LeaseLost:
        raise
    except Exception as exc:  # anything else the step hit is this session's failure
        run.error = exc


async def _prepare(run: _Run) -> None:
    plan, state = run.plan, run.plan.state
    if run.unconfirmed:
        await lost_writes_intent(run.ov, plan)
    if state.intent is not None:
        if run.settings.publish_replicas > 0:
            count_following_entries(plan)
        recheck_s = run.settings.capture_settle_recheck_s
        state.settle_intent(await settled_total(run.ov, plan.session.ov_session_id, recheck_s))
        plan.settled = True
        log.info(
            "session %s: settled an interrupted write (last %s, %d already in part)",
            plan.session.ov_session_id,
            state.last_id,
            state.partial_skip,
        )
        # the plan was made before settling: redo it with what OV holds
        fresh = plan_round(run.settings, plan.session, run.entries, state, isolate=run.isolate)
        plan.units, plan.failed_entry, plan.failure = fresh.units, fresh.failed_entry, fresh.failure
    if plan.imports_into_unknown:
        total = await ov_total(run.ov, plan.session.ov_session_id)
        if total > 0:  # its state expired (sessionStateTtlS): OV has the history the import carries
            log.info(
                "session %s: an import writes nothing: OV already holds %d of its messages",
                plan.session.ov_session_id,
                total,
            )
            fresh = plan_round(run.settings, plan.session, run.entries, state, isolate=run.isolate, in_ov=True)
            plan.units, plan.failed_entry, plan.failure = fresh.units, fresh.failed_entry, fresh.failure
        plan.base = total
    if plan.messages and plan.base is None:
        plan.base = state.total if state.total is not None else await ov_total(run.ov, plan.session.ov_session_id)


async def _write(c: RoundHost, run: _Run) -> None:
    plan = run.plan
    c.check_lease()
    c.worker.fault("before_write")
    result = await run.ov.add_messages(plan.session.ov_session_id, plan.messages)
    plan.added, plan.pending_tokens, plan.active_after = result.added, result.pending_tokens, result.message_count
    c.worker.fault("after_write")


def _session(group: list[Entry]) -> SessionRef:
    session = group[0].session
    if session is None:  # the shard consumer groups only entries it resolved to a session
        raise ValueError(f"entry {group[0].id} has no session")
    return session


async def run_round(c: RoundHost, groups: list[list[Entry]]) -> RoundOutcome:
    settings, redis, worker = c.settings, c.redis, c.worker
    groups, erased = await drop_erased(settings, redis, c.fence, worker.tombstones, groups)
    outcome = RoundOutcome(acked=erased)  # an erased session's turns: acked, never applied
    async with redis.pipeline(transaction=False) as pipe:
        for entries in groups:
            pipe.hgetall(_session(entries).applied_key)
        raws = await pipe.execute()
    runs: list[_Run] = []
    cpu = CpuSlice()
    for entries, raw in zip(groups, raws):
        await cpu.breathe()
        ref = _session(entries)
        state = AppliedState.from_hash(raw)
        if state.parked is not None:
            entries = await entries_of_parked(redis, settings, c.failures, c.dead_letter, ref, entries, state.parked)
            if not entries:
                continue
        isolate = ref.ov_session_id in c.isolate
        plan = plan_round(
            settings, ref, entries, state, isolate=isolate, numbers=worker.numbering.of(ref.ov_session_id)
        )
        unconfirmed = settings.publish_replicas > 0 and worker.recorded.unconfirmed(ref.applied_key, state)
        runs.append(_Run(plan, worker.ov_for(ref), settings, entries, isolate, unconfirmed))
    slots = worker.ov_slots
    results = await asyncio.gather(*(_guard(r, partial(_prepare, r), slots) for r in runs), return_exceptions=True)
    _raise_kill(results)
    writing = [r for r in runs if r.ok and r.plan.messages]
    if writing:
        intents = []
        for r in writing:
            fields = r.plan.state.settled_fields() if r.plan.settled else {}
            fields[INTENT] = r.plan.make_intent().encode()
            intents.append(HashWrite(r.plan.session.applied_key, fields, px=_state_ms(c, r.plan.state)))
        await c.fence.apply(intents)
        results = await asyncio.gather(
            *(_guard(r, partial(_write, c, r), slots) for r in writing), return_exceptions=True
        )
        _raise_kill(results)
    _server_errors_are_ov_failing(runs)
    finished = [r for r in runs if r.ok and r.plan.units]
    if finished:
        c.check_lease()
        worker.fault("before_ack")
        applied, recorded = [], []
        for r in finished:
            applied += import_records(settings, r.plan)  # before finishing the state (its partial entry)
            state = finish_state(r.plan)
            recorded.append((r.plan.session.applied_key, state))
            fields = state.applied_fields()
            fields[PARTIAL_ID], fields[PARTIAL_SKIP] = state.partial_id or "", str(state.partial_skip)
            dropped = (INTENT,) if state.parked is not None else (INTENT, PARKED)
            applied.append(HashWrite(r.plan.session.applied_key, fields, dropped, px=_state_ms(c, state)))
            applied += applied_letters(r.plan.session, r.plan.entries)
            if r.plan.grows_ov and state.last_id is not None:
                # until a snapshot this new is stored, the stored one is no snapshot to assemble
                behind = {SNAPSHOT_BEHIND: state.last_id}
                applied.append(
                    HashWrite(snapshot_key(settings, r.plan.session.address), behind, px=settings.snapshot_ttl_s * 1000)
                )
        applied += c.failures.forget([e for r in finished for e in r.plan.entries])
        try:
            await c.fence.apply(applied, [e.id for r in finished for e in r.plan.entries if e.letter is None])
        except LeaseLost:
            if writing:  # the intents stay: the next owner learns from OV's count what got in
                log.warning(
                    "shard lease lost after writing %d sessions to OV; not acked, the next owner settles them",
                    len([r for r in writing if r.ok]),
                )
            raise
        for key, state in recorded:
            worker.recorded.remember(key, state)
        for r in finished:
            outcome.acked.extend(r.plan.entries)
            worker.stats.count_applied(r.plan)
        worker.fault("after_ack")
        await count_masked(redis, settings, [r.plan for r in finished])
        count_usage([r.plan for r in finished])
        await delete_letters(redis, settings, [e for r in finished for e in r.plan.entries])
    await _record_failures(c, runs, outcome)
    written = [r for r in finished if r.plan.grows_ov]
    if written:
        await _follow_up(c, written)
    await _commit_on_markers(c, finished)
    return outcome


def _server_errors_are_ov_failing(runs: list[_Run]) -> None:
    """OV's own passing trouble (``is_passing``) answered to every session of the round that
    reached it is OV failing, not the entries: those runs become unavailable (the shard backs
    off, nothing counts against an entry, nothing applies past it). Beside writes that went
    through, such an answer says something of the entry it answered, and counts."""
    failing = [r for r in runs if isinstance(r.error, OVError) and is_passing(r.error)]
    if not failing or any(r.ok and r.plan.messages for r in runs):
        return
    for r in failing:
        error = cast(OVError, r.error)
        r.unavailable = OVUnavailable(error.code, f"HTTP {error.status} to every session: {error.message}")
        r.error = None


def _state_ms(c: RoundHost, state: AppliedState) -> int:
    """How long the session's applied state lives from this write (``sessionStateTtlS``); a
    parked session's, until it is released (``fence.KEEP``)."""
    return KEEP if state.parked is not None else c.settings.session_state_ttl_s * 1000


async def _commit_on_markers(c: RoundHost, finished: list[_Run]) -> None:
    """Commit markers (the conversation ended): every earlier turn is in OV now, so commit."""
    for r in finished:
        for reason in dict.fromkeys(commit_markers(r.plan)):
            session = r.plan.session
            try:
                await c.worker.request_commit(session, reason)
                log.info("session %s: %s commit requested", session.ov_session_id, reason)
            except Exception as exc:  # the marker is acked: this commit is not asked again
                log.error("session %s: %s commit request failed: %s", session.ov_session_id, reason, exc)


async def _record_failures(c: RoundHost, runs: list[_Run], outcome: RoundOutcome) -> None:
    for r in runs:
        plan = r.plan
        if r.unavailable is not None:
            outcome.unavailable = str(r.unavailable)
            continue
        if r.error is not None:
            writers = [u.entry for u in plan.units if not u.skip]
            if len(writers) > 1:  # which entry broke the merged write? try them one at a time
                outcome.isolate.add(plan.session.ov_session_id)
                log.info("session %s: merged write failed (%s); isolating entries", plan.session.ov_session_id, r.error)
                continue
            await c.record_failure(writers[0] if writers else plan.entries[0], r.error)
            continue
        if plan.failed_entry is not None:
            await c.record_failure(plan.failed_entry, plan.failure or RuntimeError("convert failed"))


async def _follow_up(c: RoundHost, written: list[_Run]) -> None:
    """After writes: commits for sessions over the threshold, then every session's snapshot."""
    settings, worker = c.settings, c.worker
    due = [
        r.plan.session
        for r in written
        if r.plan.pending_tokens is not None and r.plan.pending_tokens >= settings.commit_token_threshold
    ]
    for session, result in zip(
        due, await asyncio.gather(*(worker.request_commit(s) for s in due), return_exceptions=True)
    ):
        if isinstance(result, Exception):  # the next batch over the threshold asks again
            log.error("session %s: commit request failed: %s", session.ov_session_id, result)

    # the stored snapshots the round's writes may grow, in one round trip (not one per session)
    async with c.redis.pipeline(transaction=False) as pipe:
        for r in written:
            pipe.hget(snapshot_key(settings, r.plan.session.address), "data")
        stored = [parse_stored(raw) for raw in await pipe.execute()]

    async def fetch(run: _Run, kept: ContextSnapshot | None) -> tuple[ContextSnapshot, int] | None:
        ref, state = run.plan.session, run.plan.state
        worker.fault("before_snapshot")
        grown = _grown(run, kept)
        if grown is not None:  # what OV holds now, known without asking it (core.snapshot_growth)
            return grown, int(time.time() * 1000)
        try:
            async with worker.ov_slots:
                fetched_ms = int(time.time() * 1000)
                context = await run.ov.get_context(ref.ov_session_id, token_budget=settings.snapshot_token_budget)
            return snapshot_from(context, ref.address, state), fetched_ms
        except OVError as exc:  # the messages are in OV; the next batch or commit refreshes again
            log.warning("session %s: snapshot not refreshed: %s", ref.ov_session_id, exc)
            return None

    fetched = [f for f in await asyncio.gather(*(fetch(r, k) for r, k in zip(written, stored))) if f is not None]
    if not fetched:
        return
    cpu = CpuSlice()
    async with c.redis.pipeline(transaction=False) as pipe:
        for snapshot, fetched_ms in fetched:
            await store_snapshot(pipe, settings, snapshot, fetched_ms)  # encodes it: sliced
            await cpu.breathe()
        worker.fault("before_snapshot_store")
        replies = await pipe.execute()
    for (snapshot, _), reply in zip(fetched, replies):
        worker.snapshot_refreshed(stored_snapshot(snapshot, reply))


def _grown(run: _Run, stored: ContextSnapshot | None) -> ContextSnapshot | None:
    """The ``stored`` snapshot grown by this round's messages (or, for a session new to OV,
    the messages alone), or None when OV must be read."""
    plan = run.plan
    if plan.active_after is None:
        return None
    address = plan.session.address
    if stored is None:
        records = first_records(
            plan.messages, ov_total_before=plan.base, added=plan.added, active_after=plan.active_after
        )
        stored = ContextSnapshot(ov_session_id=address.ov_session_id, agent_id=address.agent_id, user=address.tenant)
    else:
        records = grown_records(
            stored, plan.messages, round_start=plan.round_start, added=plan.added, active_after=plan.active_after
        )
    return None if records is None else grown_snapshot(stored, records, plan.state)
