"""Capture's record of a session settled against OV's own count of its messages.

Two ways capture's record in Redis can say less than OV holds, and one answer to both: ask
OV how many messages the session has ever had (``total_message_count``), and skip what of
the entries being applied is there already.

- **A crash** between the OV write and the XACK leaves the write's intent in the applied
  hash (recorded before the write): ``settled_total`` reads OV's count for it.
- **A Redis that lost writes**: Redis replicates asynchronously, so a failover can promote a
  replica that lacks its master's newest writes, capture's applied offset and intent among
  them. Read back, such a session's record is older than OV; its entries, read again, would
  go to OV twice. ``RecordedStates`` remembers what this process recorded of each session;
  with ``publishReplicas`` (a deployment with replicas) capture asks OV before writing for a
  session whose record is older than that, or that this process has recorded nothing of yet
  (it took the shard over, or started), and what OV holds beyond the record is settled as an
  interrupted write is (``lost_writes_intent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from cachetools import LRUCache

from core.ov.client import OVClient, OVError
from workers.capture.plan import SessionRound, intent_of
from workers.store.applied import AppliedState, parse_id

log = logging.getLogger("ovstream.capture")

RECORDED_BYTES = 8 * 1024 * 1024
"""Most bytes one capture process keeps of what it last recorded of each session: ~20,000
sessions (measured ~410 bytes each). A session recorded longer ago costs one more look at OV's
message count when it next talks (``unconfirmed``)."""
RECORD_BYTES = 300
"""One record besides its key: the tuples, their ints and the cache's own entry (measured
~430 bytes with a 70-character key)."""


async def ov_total(ov: OVClient, ov_session_id: str) -> int:
    """OV's count of every message ever added to the session (0 for a session not yet there)."""
    try:
        state = await ov.get_session(ov_session_id)
    except OVError as exc:
        if exc.status == 404:
            return 0
        raise
    if state.total_message_count is None:  # not seen on 0.5.2; the active count is the best left
        log.warning("OV gave no total_message_count for %s; using message_count", ov_session_id)
        return state.message_count
    return state.total_message_count


async def settled_total(ov: OVClient, ov_session_id: str, recheck_s: float) -> int:
    """OV's total once two reads ``recheck_s`` apart agree (``captureSettleRecheckS``:
    the interrupted write may still be on its way to OV)."""
    total = await ov_total(ov, ov_session_id)
    while recheck_s > 0:
        await asyncio.sleep(recheck_s)
        again = await ov_total(ov, ov_session_id)
        if again == total:
            break
        log.warning("session %s: OV's count moved %d -> %d while settling; reading again", ov_session_id, total, again)
        total = again
    return total


class RecordedStates:
    """What this process last recorded of each session: its applied stream id and OV total."""

    def __init__(self, max_bytes: int = RECORDED_BYTES) -> None:
        self._records: LRUCache[str, tuple[tuple[int, int], int, int]] = LRUCache(max_bytes, getsizeof=lambda r: r[2])

    def remember(self, applied_key: str, state: AppliedState) -> None:
        if state.last_id is not None and state.total is not None:
            with contextlib.suppress(ValueError):  # larger than the whole budget: read again next time
                self._records[applied_key] = (parse_id(state.last_id), state.total, len(applied_key) + RECORD_BYTES)

    def unconfirmed(self, applied_key: str, state: AppliedState) -> bool:
        """Whether ``state``, read from Redis, may lack writes: older than what this process
        recorded of the session, or a session it has recorded nothing of."""
        recorded = self._records.get(applied_key)
        if recorded is None:
            return True
        last_id, total, _ = recorded
        return state.last_id is None or parse_id(state.last_id) < last_id or (state.total or 0) < total


async def lost_writes_intent(ov: OVClient, plan: SessionRound) -> None:
    """When OV holds more of the session than its record says (Redis lost writes), give the
    record the intent of a write of this round's entries made from it, so that they settle as
    an interrupted write does. Needs a record with a total and no intent."""
    state = plan.state
    if state.intent is not None or state.total is None or not plan.messages:
        return
    total = await ov_total(ov, plan.session.ov_session_id)
    if total <= state.total:
        return
    log.warning(
        "session %s: OV holds %d messages, capture's record in Redis %d (a failover lost its newest "
        "writes?); settling what OV has of the entries read again",
        plan.session.ov_session_id,
        total,
        state.total,
    )
    state.intent = intent_of(state.total, [u for u in plan.units if not u.skip])


def count_following_entries(plan: SessionRound) -> None:
    """Count in the recorded intent the round's entries after its own, so that what OV holds
    beyond the intent's write settles as theirs (a deployment with ``publishReplicas``).

    A promoted replica is a prefix of its master: it may keep the intent of a write but not
    the ack after it, nor the rounds of the session that came next, whose messages OV holds.
    Capture writes a session's entries in stream order, and with ``publishReplicas`` every
    entry it wrote is on the replica (or published again), so OV's surplus is the entries
    that follow in the stream. Without replicas confirming publishes an entry written to OV
    may be missing from the replica: the surplus is then no evidence about the next entries
    (new turns), and only the intent's own entries settle."""
    intent = plan.state.intent
    assert intent is not None
    last = parse_id(intent.entries[-1][0]) if intent.entries else (0, 0)
    following = intent_of(0, [u for u in plan.units if not u.skip and parse_id(u.entry.id) > last])
    if len(intent.events) == len(intent.entries):  # else an earlier release's intent: kept as it is
        intent.events += following.events
    # not their captured counts: planned before the settle, from a count that may lack the
    # intent's own entries; in this round, the plan made after it counts them in order
    intent.entries += following.entries
