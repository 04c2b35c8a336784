"""Lost memory extractions: suspected, re-run alone, and counted when the re-run shows the
loss (core.repair).

A commit whose phase 2 completed with no memories has its archive looked at by the job
``check_extraction`` (scheduled by the poller, workers.commits.run). When its phase 2
overlapped another of its OV user (``core.repair.overlapped``: only then does OV merge
extractions) and the archive held substantive user text, the extraction may have been lost
to the merge, or there was nothing worth remembering: the commit waits as a suspect of its
user, and the user's suspects are repaired together in one session committed alone
(workers.commits.repair_pool: an ordinary commit, reason ``manual``, listed in
``Keys.extraction_repairs``: ``ovstream status``, the console), said at INFO. The repair's own
commit decides: memories written alone mean the merge lost them (counted once per repair in
``Keys.extractions_lost``, ``ovstream_extractions_lost_total``, its alert, and a WARNING); none
written means nothing was lost (INFO). So a user who says nothing memorable in two sessions at
once raises no alarm, and costs at most ``extraction_repairs_per_hour`` phase 2s an hour.

Once per archive: a claim (``Keys.extraction_repair``, a string with the session state's
lifetime) names the repair commit, and a job run again finds it. A repair's own commit is never
repaired in turn.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis as redis_lib

from core.config import Settings
from core.events import CommitOutcome, CommitRequest, decode
from core.ov.client import OVError
from core.ov.envelope import is_passing
from core.repair import REPAIR_ATTEMPTS, is_repair_session, lost_extraction, overlapped, user_text
from workers import logs
from workers.commits.context import JobContext, context_for
from workers.commits.records import OUTCOME_FIELD, CommitRecords, decoded, in_flight_requests
from workers.commits.repair_pool import RepairEntry, suspect, suspect_again, suspects_waiting
from workers.commits.run import patiently
from workers.commits.schedule import schedule_extraction_check
from workers.store.connection import optional_text, stream_entries
from workers.store.keys import Keys

log = logging.getLogger(__name__)


def check_extraction(request_json: str, key_prefix: str) -> str:
    """RQ job: was ``request``'s extraction lost? If so, repair it (once). Returns what it did."""
    request = decode(request_json, CommitRequest)
    with logs.fields(session=request.ov_session_id, commit_id=request.commit_id):
        ctx = context_for(key_prefix)
        said = patiently(request, lambda: run_check(ctx.store, ctx, request))  # a Redis blip: waited out
        log.info("commit %s: extraction check: %s", request.commit_id, said)
        return said


def run_check(redis: redis_lib.Redis, ctx: JobContext, request: CommitRequest) -> str:
    settings, keys = ctx.settings, Keys(ctx.settings.key_prefix)
    if is_repair_session(request.ov_session_id):
        return _verdict(redis, settings, request)
    if redis.exists(keys.extraction_repair(request.commit_id)):
        return "already repaired"
    outcome = CommitRecords(redis, settings).outcome(request)
    if outcome is None or not outcome.archive_uri:
        return "no archive"
    if not overlapped((outcome.requested_at, outcome.finished_at or time.time()), _others(redis, settings, request)):
        return "alone: nothing a merge could lose"
    ov, sid = ctx.ov(request.address), request.ov_session_id
    archive_id = outcome.archive_uri.rstrip("/").rsplit("/", 1)[-1]
    try:
        archive = ctx.run(lambda: ov.get_archive(sid, archive_id))
    except OVError as exc:
        return _unreadable(redis, settings, request, outcome, archive_id, exc)
    if not lost_extraction(outcome.status, outcome.memories_extracted, archive.messages):
        return "nothing lost"
    return suspect(redis, settings, request, outcome.archive_uri, len(user_text(archive.messages)))


CHECK_AGAIN_S = 5.0
"""How long a check whose archive OV could not give waits before it looks again."""


def _unreadable(
    redis: redis_lib.Redis,
    settings: Settings,
    request: CommitRequest,
    outcome: CommitOutcome,
    archive_id: str,
    exc: OVError,
) -> str:
    """OV could not give the archive: its passing trouble (away, a 5xx, its own file read
    mid-write) is looked at again until ``phase2_deadline_s`` after the commit ended (a
    check dropped here leaves a lost extraction unrepaired, and nobody would know)."""
    since = time.time() - (outcome.finished_at or outcome.requested_at)
    again = is_passing(exc) and since < settings.phase2_deadline_s
    log.log(
        logging.INFO if again else logging.WARNING,
        "commit %s: could not read archive %s to check its extraction (%s); %s",
        request.commit_id,
        archive_id,
        exc,
        f"looking again in {CHECK_AGAIN_S:.0f} s" if again else "not checked: a lost extraction stays unrepaired",
    )
    if not again:
        return "archive unreadable"
    schedule_extraction_check(redis, settings, request, delay_s=CHECK_AGAIN_S)
    return "archive unreadable: looks again"


def _verdict(redis: redis_lib.Redis, settings: Settings, repair: CommitRequest) -> str:
    """What a repair's own commit shows: memories written alone, so the first extraction was
    lost (counted once, said at WARNING), or none, so nothing was."""
    outcome = CommitRecords(redis, settings).outcome(repair)
    if outcome is None or outcome.status != "completed":
        return "repair unfinished"
    if not outcome.memories_extracted:
        # a repair starts once its user's commits are final: one that began while it ran may have shared its batch
        ran = (outcome.requested_at, outcome.finished_at or time.time())
        if overlapped(ran, _others(redis, settings, repair), margin_s=0.0):
            again, given_up = suspect_again(redis, settings, repair)
            log.log(
                logging.WARNING if given_up else logging.INFO,
                "repair commit %s (session %s) wrote no memories, but beside another commit of its user (a "
                "merge may have lost them again): %d suspects wait for another repair, %d given up after %d tries",
                repair.commit_id,
                repair.ov_session_id,
                again,
                given_up,
                REPAIR_ATTEMPTS,
            )
            return "inconclusive: suspected again"
        log.info(
            "repair commit %s (session %s) wrote no memories alone either: nothing had been lost",
            repair.commit_id,
            repair.ov_session_id,
        )
        return "nothing was lost"
    keys = Keys(settings.key_prefix)
    if not redis.set(keys.extraction_loss(repair.commit_id), 1, nx=True, ex=settings.session_state_ttl_s):
        return "loss counted already"
    redis.incr(keys.extractions_lost())
    log.warning(
        "repair commit %s (session %s) wrote %d memories from what the user said, which the first "
        "phase 2, merged with another of its user, had lost (an extraction lost, now repaired)",
        repair.commit_id,
        repair.ov_session_id,
        outcome.memories_extracted,
    )
    return "lost, repaired"


OTHERS_READ = 500
"""Most recent final outcomes, and in-flight commits, read for one that overlapped."""


def _others(redis: redis_lib.Redis, settings: Settings, request: CommitRequest) -> list[tuple[float, float | None]]:
    """(asked for, final or None) of the other commits of ``request``'s OV user lately: the
    newest final outcomes of the deployment and the commits in flight."""
    entries = stream_entries(redis.xrevrange(Keys(settings.key_prefix).commit_outcomes(), count=OTHERS_READ))
    outcomes = [decoded(fields.get(OUTCOME_FIELD.encode()), CommitOutcome) for _, fields in entries]
    requests = in_flight_requests(redis, settings, OTHERS_READ)
    return [
        (other.requested_at, other.finished_at if isinstance(other, CommitOutcome) else None)
        for other in (*outcomes, *requests)
        if other is not None and other.user == request.user and other.commit_id != request.commit_id
    ]


@dataclass(frozen=True, slots=True)
class LostExtractions:
    """What ``ovstream status``, ``/metrics`` and the console say of lost extractions."""

    lost_total: int
    """Extractions lost since the deployment began, as their repairs showed (the counter)."""
    repairs: dict[str, int]
    """The listed repairs by their commit's state (pending, running, completed, failed, ...)."""
    newest: list[tuple[RepairEntry, str, int | None]]
    """The newest few: the entry, its repair's state and the memories it wrote."""
    repairs_started: int = 0
    """Repair commits started since the deployment began (each one more phase 2)."""
    suspects_waiting: int = 0
    """Suspected lost extractions waiting for their user's repair."""


def read_lost_extractions(redis: redis_lib.Redis, settings: Settings, *, newest: int = 5) -> LostExtractions:
    keys, records = Keys(settings.key_prefix), CommitRecords(redis, settings)
    total = int(optional_text(redis.get(keys.extractions_lost())) or 0)
    started = int(optional_text(redis.get(keys.extraction_repairs_started())) or 0)
    by_state: dict[str, int] = {}
    shown: list[tuple[RepairEntry, str, int | None]] = []
    for _, fields in reversed(stream_entries(redis.xrevrange(keys.extraction_repairs(), count=200))):
        entry = decoded(fields.get(b"e"), RepairEntry)
        if entry is None:
            continue
        outcome = records.outcome(entry.repair)
        state = outcome.status if outcome is not None else "unknown"
        by_state[state] = by_state.get(state, 0) + 1
        shown.append((entry, state, outcome.memories_extracted if outcome is not None else None))
    return LostExtractions(
        total,
        dict(sorted(by_state.items())),
        list(reversed(shown))[:newest],
        repairs_started=started,
        suspects_waiting=suspects_waiting(redis, settings),
    )
