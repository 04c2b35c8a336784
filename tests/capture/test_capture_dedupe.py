"""Duplicates the stream cannot tell apart: an event re-published under a new stream id
(same event_id), and the commitTurn transcript count (``captured``)."""

from __future__ import annotations

import time

import msgspec

from core.config import Settings
from core.events import TurnEvent
from core.session import SessionAddress
from tests.helpers.capture import expected_texts, make_worker, ov_texts, publish, stored_snapshot, turn
from workers.capture.plan import Entry, finish_state, plan_round, session_of
from workers.store.applied import EVENT_IDS_KEPT, AppliedState, Intent


def _entry(settings: Settings, event: TurnEvent, entry_id: str) -> Entry:
    return Entry(entry_id, b"", event=event, session=session_of(settings, event))


def _applied(client, settings: Settings, event: TurnEvent) -> AppliedState:
    return AppliedState.from_hash(client.hgetall(session_of(settings, event).applied_key))


def commit_turn(session: str, index: int) -> TurnEvent:
    """commitTurn of OpenClaw >= 2026.8.1: only this turn's messages, an advancement key."""
    messages = [
        {"role": "user", "content": f"{session}:q{index}"},
        {"role": "assistant", "content": [{"type": "text", "text": f"{session}:a{index}"}]},
    ]
    return TurnEvent(
        event_id=f"{session}-ev{index}",
        session_id=session,
        messages=messages,
        pre_prompt_message_count=0,
        advancement_key=f"{session}-adv{index}",
        published_at=time.time(),
    )


# --- re-published events -----------------------------------------------------------------


async def test_a_republished_event_is_captured_once(redis_client, settings, fake_ov):
    first, second = turn("rep", 0), turn("rep", 1)
    publish(redis_client, settings, [first, second, second])  # the publisher lost the 2nd XADD reply
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert ov_texts(fake_ov, "rep") == expected_texts("rep", 2)
    assert worker.stats.skipped == 1
    assert _applied(redis_client, settings, first).captured == 4

    # re-sent again much later, and the first one too: a later round still knows them
    publish(redis_client, settings, [first, second])
    later = make_worker(settings, fake_ov, burst=True)
    await later.run()
    assert later.stats.skipped == 2 and later.stats.ov_writes == 0
    assert ov_texts(fake_ov, "rep") == expected_texts("rep", 2)
    state = _applied(redis_client, settings, first)
    assert state.captured == 4  # the replayed older event did not move it back
    assert {first.event_id, second.event_id} <= set(state.event_ids)
    snapshot = stored_snapshot(redis_client, settings, SessionAddress("rep", "main", None))
    assert snapshot is not None and snapshot.captured_through == 4


def test_plan_skips_an_event_id_seen_before_without_moving_captured(settings):
    events = [turn("s", 0), turn("s", 1)]
    state = AppliedState(last_id="2-0", captured=4, event_ids=[e.event_id for e in events])
    entries = [_entry(settings, events[0], "3-0"), _entry(settings, events[1], "4-0")]
    plan = plan_round(settings, entries[0].session, entries, state)
    assert [u.skip for u in plan.units] == ["event seen", "event seen"] and plan.messages == []
    final = finish_state(plan)
    assert (final.last_id, final.captured) == ("4-0", 4)


def test_plan_skips_a_duplicate_within_one_round(settings):
    event = turn("s", 0)
    entries = [_entry(settings, event, "1-0"), _entry(settings, event, "2-0")]
    plan = plan_round(settings, entries[0].session, entries, AppliedState())
    assert [u.skip for u in plan.units] == [None, "event seen"]
    assert len(plan.messages) == 2


def test_event_ids_are_bounded_and_survive_the_hash():
    state = AppliedState()
    for i in range(EVENT_IDS_KEPT + 50):
        state.remember_event(f"e{i}")
    state.remember_event(f"e{EVENT_IDS_KEPT + 49}")  # again: kept once
    assert len(state.event_ids) == EVENT_IDS_KEPT and state.event_ids[-1] == f"e{EVENT_IDS_KEPT + 49}"
    raw = {k.encode(): v.encode() for k, v in state.applied_fields().items()}
    assert AppliedState.from_hash(raw).event_ids == state.event_ids


def test_an_entry_a_crashed_write_stored_is_remembered(settings):
    event = turn("s", 1)
    state = AppliedState(last_id="1-0", captured=2, intent=Intent(2, [("2-0", 2)]))
    state.settle_intent(ov_total=4)  # the write went through before the crash
    entry = _entry(settings, event, "2-0")
    plan = plan_round(settings, entry.session, [entry], state)
    assert [u.skip for u in plan.units] == ["written before a crash"] and plan.messages == []
    final = finish_state(plan)
    assert final.captured == 4 and event.event_id in final.event_ids


# --- commitTurn's captured count ---------------------------------------------------------------


def test_commit_turns_add_their_messages_to_captured(settings):
    events = [commit_turn("c", i) for i in range(3)]
    entries = [_entry(settings, e, f"{i + 1}-0") for i, e in enumerate(events)]
    plan = plan_round(settings, entries[0].session, entries, AppliedState())
    plan.base, plan.added = 0, 6
    assert finish_state(plan).captured == 6

    resent = _entry(settings, commit_turn("c", 2), "9-0")  # same advancement key and event id
    again = plan_round(settings, resent.session, [resent], plan.state)
    assert finish_state(again).captured == 6


async def test_the_snapshot_of_commit_turns_counts_the_whole_transcript(redis_client, settings, fake_ov):
    publish(redis_client, settings, [commit_turn("ct", i) for i in range(3)])
    await make_worker(settings, fake_ov, burst=True).run()
    publish(redis_client, settings, [commit_turn("ct", 3)])
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "ct") == expected_texts("ct", 4)
    snapshot = stored_snapshot(redis_client, settings, SessionAddress("ct", "main", None))
    # 8 OpenClaw messages are in OV: the lag overlay must not append the transcript again
    assert snapshot is not None and snapshot.captured_through == 8


# --- conversation ends and bootstrap imports ------------------------------------------------


def _marker(session: str) -> TurnEvent:
    return TurnEvent(
        event_id=f"{session}-end", session_id=session, messages=[], commit="session_end", published_at=time.time()
    )


def _import(session: str, texts: list[str]) -> TurnEvent:
    return TurnEvent(
        event_id=f"import-{session}",
        session_id=session,
        import_transcript=True,
        messages=[{"role": "user", "content": t} for t in texts],
        published_at=time.time(),
    )


async def test_a_commit_marker_commits_after_every_earlier_turn(redis_client, settings, fake_ov):
    from core.session import SessionAddress
    from workers.commits.records import CommitRecords

    publish(redis_client, settings, [turn("end", 0), turn("end", 1), _marker("end")])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert ov_texts(fake_ov, "end") == expected_texts("end", 2)  # the turns went first
    [commit] = CommitRecords(redis_client, settings).list(SessionAddress("end", "main", None))
    assert commit.reason == "session_end"
    assert worker.stats.commits_requested == 1


async def test_a_bypassed_sessions_end_asks_ov_for_nothing(redis_client, settings, fake_ov):
    settings = settings.model_copy(update={"bypass_session_patterns": ["agent:*:cron:**"]})
    key = "agent:main:cron:nightly:run:1"
    marker = msgspec.structs.replace(_marker("cron-run"), session_key=key)
    publish(redis_client, settings, [turn("cron-run", 0, session_key=key), marker])
    calls_before = len(fake_ov.calls)
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert fake_ov.calls[calls_before:] == []  # no session read, no commit
    assert worker.stats.commits_requested == 0


async def test_an_import_is_written_only_into_a_session_capture_never_touched(redis_client, settings, fake_ov):
    publish(redis_client, settings, [_import("imp", ["old one", "old two"]), turn("imp", 0)])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert ov_texts(fake_ov, "imp")[:2] == ["old one", "old two"]
    # Another gateway (or a lost marker) imports again, under a new event id: nothing is written.
    again = msgspec.structs.replace(_import("imp", ["old one", "old two"]), event_id="import-imp-2")
    publish(redis_client, settings, [again])
    later = make_worker(settings, fake_ov, burst=True)
    await later.run()
    assert ov_texts(fake_ov, "imp").count("old one") == 1 and later.stats.ov_writes == 0


async def test_an_import_after_a_turn_in_the_same_round_writes_nothing(redis_client, settings, fake_ov):
    # A process that first sees a session after it published turn 0 imports the
    # transcript, turn 0 included: capture must not write turn 0 twice.
    first = turn("late", 0)
    publish(redis_client, settings, [first, _import("late", ["late:q0", "late:a0"])])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert ov_texts(fake_ov, "late") == expected_texts("late", 1)
