"""Every final commit outcome reaches the outcome stream (workers.commits.records): a
recorder that stops between the record (its MULTI) and the stream append (another slot)
leaves the outcome filed as unannounced, and the commit workers' sweep appends it, once."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from core.events import CommitOutcome, CommitRequest, decode
from workers.commits.records import ANNOUNCE_GRACE_S, OUTCOME_FIELD, CommitRecords, outcome_of
from workers.store.keys import Keys

LATER = ANNOUNCE_GRACE_S + 1


class RecorderStopped(Exception):
    """The recorder's process ending between its record and its append."""


def request(commit_id: str = "c1") -> CommitRequest:
    return CommitRequest(
        commit_id=commit_id,
        ov_session_id="s1",
        agent_id="main",
        keep_recent_count=0,
        generation=1,
        requested_at=time.time(),
    )


def announced(redis_client, settings) -> list[str]:
    """The commit ids of the outcome stream's entries, oldest first."""
    entries = redis_client.xrange(Keys(settings.key_prefix).commit_outcomes())
    return [decode(fields[OUTCOME_FIELD.encode()], CommitOutcome).commit_id for _, fields in entries]


def stopping_before_the_append(records: CommitRecords, monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*_: object) -> None:
        raise RecorderStopped

    monkeypatch.setattr(records, "_announce", stop)


def record_completed(records: CommitRecords, req: CommitRequest) -> None:
    records.record(req, outcome_of(req, "completed", finished_at=time.time()))


def correct_a_timeout(records: CommitRecords, req: CommitRequest) -> None:
    records.correct_timeout(req, outcome_of(req, "completed", finished_at=time.time()))


def timed_out(records: CommitRecords, req: CommitRequest) -> None:
    records.record(req, outcome_of(req, "timeout", finished_at=time.time()))


def nothing(records: CommitRecords, req: CommitRequest) -> None:
    pass


WRITES = {"record": (nothing, record_completed), "correct_timeout": (timed_out, correct_a_timeout)}
"""How a final outcome is written: what comes before (announced as usual), then the write."""


@pytest.mark.parametrize("write", sorted(WRITES))
def test_an_outcome_left_unannounced_is_appended_once_by_the_sweep(
    redis_client, settings, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    records, req = CommitRecords(redis_client, settings), request()
    setup, final_write = WRITES[write]
    setup(CommitRecords(redis_client, settings), req)
    before = announced(redis_client, settings)
    stopping_before_the_append(records, monkeypatch)
    with pytest.raises(RecorderStopped):
        final_write(records, req)
    assert records.outcome(req).status == "completed"  # the record of truth has it
    assert announced(redis_client, settings) == before  # the stream does not

    sweeper = CommitRecords(redis_client, settings)
    assert sweeper.announce_left() == 0  # within the grace: a live recorder would be announcing it
    assert sweeper.announce_left(now=time.time() + LATER) == 1
    assert announced(redis_client, settings) == [*before, req.commit_id]
    assert sweeper.announce_left(now=time.time() + 2 * LATER) == 0  # once
    assert announced(redis_client, settings) == [*before, req.commit_id]
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 0  # nothing left to look at


@pytest.mark.parametrize("write", sorted(WRITES))
def test_an_announced_outcome_is_not_appended_again(redis_client, settings, write: str) -> None:
    records, req = CommitRecords(redis_client, settings), request()
    for step in WRITES[write]:
        step(records, req)
    once = announced(redis_client, settings)
    assert once[-1] == req.commit_id
    assert records.announce_left(now=time.time() + LATER) == 0
    assert announced(redis_client, settings) == once
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 0


@pytest.mark.parametrize("write", sorted(WRITES))
def test_an_announced_outcome_leaves_the_sweep_nothing_to_look_at(redis_client, settings, write: str) -> None:
    records, req = CommitRecords(redis_client, settings), request()
    for step in WRITES[write]:
        step(records, req)
    assert announced(redis_client, settings)[-1] == req.commit_id
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 0  # no sweep needed


def c1_left_unannounced(redis_client, settings, monkeypatch: pytest.MonkeyPatch) -> CommitRecords:
    """The recorder of commit c1, stopped between its record and its append."""
    records = CommitRecords(redis_client, settings)
    stopping_before_the_append(records, monkeypatch)
    with pytest.raises(RecorderStopped):
        record_completed(records, request("c1"))
    return records


def test_a_sessions_entry_stays_while_another_of_its_outcomes_is_unannounced(
    redis_client, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1_left_unannounced(redis_client, settings, monkeypatch)
    record_completed(CommitRecords(redis_client, settings), request("c2"))  # announced at once
    assert announced(redis_client, settings) == ["c2"]
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 1  # c1 is still found
    assert CommitRecords(redis_client, settings).announce_left(now=time.time() + LATER) == 1
    assert announced(redis_client, settings) == ["c2", "c1"]


def test_a_session_recorded_again_while_the_sweep_looks_stays_indexed(
    redis_client, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = c1_left_unannounced(redis_client, settings, monkeypatch)
    sweeper = CommitRecords(redis_client, settings)
    original_hgetall: Callable[..., dict[bytes, bytes]] = redis_client.hgetall

    def a_recorder_meanwhile(key: str) -> dict[bytes, bytes]:
        values = original_hgetall(key)
        with pytest.raises(RecorderStopped):  # another commit of the session, stopped the same way
            record_completed(records, request("c2"))
        return values

    monkeypatch.setattr(redis_client, "hgetall", a_recorder_meanwhile)
    assert sweeper.announce_left(now=time.time() + LATER) == 1  # c1; c2 came after the look
    monkeypatch.setattr(redis_client, "hgetall", original_hgetall)
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 1  # c2 is still found
    assert sweeper.announce_left(now=time.time() + 2 * LATER) == 1
    assert announced(redis_client, settings)[-2:] == ["c1", "c2"]


def test_something_that_is_no_outcome_is_dropped_and_the_rest_announced(redis_client, settings) -> None:
    records = CommitRecords(redis_client, settings)
    keys = records.session_keys(request().address)
    redis_client.zadd(Keys(settings.key_prefix).unannounced_index(), {keys.commits_unannounced: 0})
    redis_client.hset(keys.commits_unannounced, "junk", b"{not json")
    assert records.announce_left() == 0
    assert not redis_client.exists(keys.commits_unannounced)
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 0
