"""A commit's Redis round trips on one real Redis (Redis's CPU a commit is mostly reading and
answering requests: bench/RESULTS.md): each step in as few as keep its order
(workers.store.in_order). The cluster tier runs the same steps one by one where order matters."""

from __future__ import annotations

import time

import pytest
import redis

from core.events import CommitRequest
from core.session import SessionAddress
from workers.commits import request as commit_request
from workers.commits.queue import commit_lines
from workers.commits.records import CommitRecords, outcome_of
from workers.commits.request import request_commit
from workers.store.keys import Keys


def reads(client: redis.Redis) -> int:
    """Requests the server has read so far, this one included."""
    return int(client.info("stats")["total_reads_processed"])


def round_trips(client: redis.Redis, since: int) -> int:
    """Requests read since ``reads`` said ``since``, the asking left out."""
    return reads(client) - since - 1


def _request(client: redis.Redis, settings, sid: str) -> CommitRequest:
    return request_commit(client, settings, SessionAddress(sid, "main", "t1"), reason="compact", keep_recent_count=0)


def test_a_request_with_no_commit_in_flight_is_three_round_trips(redis_client, settings) -> None:
    _request(redis_client, settings, "warm")  # RQ asks the server's version once per client
    before = reads(redis_client)
    made = _request(redis_client, settings, "free")
    # the slot and counter read; the index entry and the commit made; the line and the push
    assert round_trips(redis_client, before) == 3
    [job_id] = [j for j in commit_lines(redis_client, settings).job_ids() if j == made.commit_id]
    assert job_id == made.commit_id
    assert redis_client.zscore(Keys(settings.key_prefix).commit_lines(), "t1") is None  # lines are by tag
    assert CommitRecords(redis_client, settings).outcome(made).status == "pending"


def test_a_request_that_finds_its_slot_taken_as_it_makes_it_joins_the_commit_there(
    redis_client, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[CommitRequest] = []
    new_request = commit_request._new_request

    def another_process_first(*args: object, **kwargs: object) -> CommitRequest:
        ours = new_request(*args, **kwargs)  # type: ignore[arg-type]
        if len(made) == 0:  # between this request's read and its script, another one makes the commit
            made.append(ours)
            made.append(_request(redis_client, settings, "raced"))
        return ours

    monkeypatch.setattr(commit_request, "_new_request", another_process_first)
    joined = _request(redis_client, settings, "raced")
    assert joined == made[1]  # the script made nothing; the watched way joined the one in flight
    assert commit_lines(redis_client, settings).job_ids().count(joined.commit_id) == 1
    assert CommitRecords(redis_client, settings).list(joined.address) == [outcome_of(joined, "pending")]


def _final(records: CommitRecords, request: CommitRequest) -> bool:
    records.record(request, outcome_of(request, "running", task_id="t"))
    return records.record(request, outcome_of(request, "completed", task_id="t", finished_at=time.time()))


def test_a_final_record_is_three_round_trips_and_leaves_the_sweep_nothing(redis_client, settings) -> None:
    records = CommitRecords(redis_client, settings)
    assert _final(records, _request(redis_client, settings, "warm"))  # each script loaded once per server
    request = _request(redis_client, settings, "final")
    records.record(request, outcome_of(request, "running", task_id="t"))
    before = reads(redis_client)
    assert records.record(request, outcome_of(request, "completed", task_id="t", finished_at=time.time()))
    # its index entry with the record; the announcement, the take-out and what is left; the entry out
    assert round_trips(redis_client, before) == 3
    assert redis_client.zcard(Keys(settings.key_prefix).unannounced_index()) == 0
