"""Bad events, repeated handler failures, the dead-letter stream and OV being down."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from core.events import STREAM_FIELD, encode
from core.session import SessionAddress
from tests.helpers.capture import (
    cli_uses,
    expected_texts,
    make_worker,
    ov_texts,
    pending_count,
    publish,
    run_until,
    stopped,
    turn,
)
from tests.helpers.waiting import eventually
from workers.capture.worker import CaptureWorker
from workers.cli import main
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys, session_keys, shard_of


@pytest.fixture
def cli_env(monkeypatch, settings):
    cli_uses(monkeypatch, settings)
    monkeypatch.setenv("OVSTREAM_SHARDS", str(settings.shards))


def _raw(client, settings, session: str, payload: dict | bytes, field: str = STREAM_FIELD) -> str:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    stream = Keys(settings.key_prefix).stream(shard_of(session, settings.shards))
    return client.xadd(stream, {field: data}).decode()


async def test_bad_events_are_dead_lettered_at_once_and_the_worker_goes_on(redis_client, settings, fake_ov):
    good = json.loads(encode(turn("mixed", 0)))
    publish(redis_client, settings, [turn("mixed", 0)])
    bad_ids = [
        _raw(redis_client, settings, "mixed", b"{not json"),
        _raw(redis_client, settings, "mixed", {**good, "v": 99}),
        _raw(redis_client, settings, "mixed", {k: v for k, v in good.items() if k != "session_id"}),
        _raw(redis_client, settings, "mixed", {**good, "session_id": "", "session_key": None}),
        _raw(redis_client, settings, "mixed", b"x", field="other"),
    ]
    publish(redis_client, settings, [turn("mixed", 1)])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    letters = list_dead_letters(redis_client, settings)
    assert [d.entry_id for d in letters] == bad_ids
    assert {d.reason for d in letters} == {"undecodable"}
    assert "unknown version" in letters[1].error and "session_id" in letters[2].error
    assert ov_texts(fake_ov, "mixed") == expected_texts("mixed", 2)
    assert pending_count(redis_client, settings) == 0


async def test_an_entry_failing_repeatedly_parks_its_session_and_a_replay_keeps_its_order(
    redis_client, settings, fake_ov, cli_env, capsys
):
    """Nothing of a session applies past an entry it could not apply: the entries behind it are
    dead-lettered too (other sessions go on), and a replay applies them all in their order."""
    # the merged write of turns 0+1 fails, then turn 0 alone fails max_deliveries + 1 times
    fake_ov.fail_next(
        1 + settings.max_deliveries + 1, status=400, code="INVALID_ARGUMENT", route="/sessions/flaky/messages/batch"
    )
    publish(redis_client, settings, [turn("flaky", 0), turn("flaky", 1), turn("fine", 0)])
    worker = make_worker(settings, fake_ov)
    await run_until([worker], lambda: len(list_dead_letters(redis_client, settings)) == 2, timeout_s=30)
    failed, parked = list_dead_letters(redis_client, settings)
    assert failed.reason == "failed" and failed.deliveries == settings.max_deliveries + 1
    assert "INVALID_ARGUMENT" in failed.error and failed.event().messages[-1]["content"] == [
        {"type": "text", "text": "flaky:a0"}
    ]
    assert parked.reason == "parked" and failed.entry_id in parked.error
    assert parked.event().messages[-1]["content"] == [{"type": "text", "text": "flaky:a1"}]
    assert ov_texts(fake_ov, "flaky") == []  # not turn 1 past turn 0
    assert ov_texts(fake_ov, "fine") == expected_texts("fine", 1)
    assert worker.stats.failures == settings.max_deliveries
    flaky_state = session_keys(settings, SessionAddress("flaky", "main")).applied
    assert redis_client.pttl(flaky_state) == -1  # parked: its state waits for the operator, no lifetime

    publish(redis_client, settings, [turn("flaky", 2)])  # a turn after the park waits too
    await make_worker(settings, fake_ov, burst=True).run()
    assert len(list_dead_letters(redis_client, settings)) == 3
    assert ov_texts(fake_ov, "flaky") == []

    assert main(["dlq", "list"]) == 0
    listing = capsys.readouterr().out
    assert "3 dead letter(s)" in listing and failed.dlq_id in listing and "flaky" in listing
    assert "failed" in listing and "parked" in listing

    assert main(["dlq", "replay", failed.dlq_id]) == 0  # one id releases the whole session
    replayed = capsys.readouterr().out
    assert f"{failed.dlq_id} released" in replayed and "0 replayed, 1 released, 0 not" in replayed
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "flaky") == expected_texts("flaky", 3)  # in their order
    assert redis_client.pttl(flaky_state) > 0  # released: its lifetime runs again
    assert list_dead_letters(redis_client, settings) == []
    publish(redis_client, settings, [turn("flaky", 3)])  # released: the session goes on
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "flaky") == expected_texts("flaky", 4)

    assert main(["dlq", "list"]) == 0
    assert "dead-letter stream is empty" in capsys.readouterr().out


async def test_a_released_letter_failing_again_keeps_the_session_parked_until_dropped(
    redis_client, settings, fake_ov, cli_env, capsys
):
    route = "/sessions/stuck/messages"
    fake_ov.fail_next(settings.max_deliveries + 1, status=400, code="INVALID_ARGUMENT", route=route)
    publish(redis_client, settings, [turn("stuck", 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    publish(redis_client, settings, [turn("stuck", 1)])
    await make_worker(settings, fake_ov, burst=True).run()
    head, behind = list_dead_letters(redis_client, settings)
    assert (head.reason, behind.reason) == ("failed", "parked")

    # the merged write of both letters fails, then the head alone max_deliveries + 1 times
    fake_ov.fail_next(1 + settings.max_deliveries + 1, status=400, code="INVALID_ARGUMENT", route=route)
    assert main(["dlq", "replay", "--all"]) == 0
    assert "0 replayed, 2 released, 0 not" in capsys.readouterr().out
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "stuck") == []  # the head failed again: nothing past it
    assert [d.dlq_id for d in list_dead_letters(redis_client, settings)] == [head.dlq_id, behind.dlq_id]

    assert main(["dlq", "drop", head.dlq_id]) == 0  # given up on: the rest applies on replay
    assert f"{head.dlq_id} dropped" in capsys.readouterr().out
    assert main(["dlq", "replay", "--all"]) == 0
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "stuck") == ["stuck:q1", "stuck:a1"]
    assert list_dead_letters(redis_client, settings) == []
    assert main(["dlq", "drop", "0-1"]) == 1
    assert "no dead letter 0-1" in capsys.readouterr().out


async def test_dlq_replay_keeps_what_cannot_be_replayed(redis_client, settings, fake_ov, cli_env, capsys):
    _raw(redis_client, settings, "junk", b"\xff\xfe")
    await make_worker(settings, fake_ov, burst=True).run()
    [letter] = list_dead_letters(redis_client, settings)
    assert main(["dlq", "replay", letter.dlq_id]) == 1  # the letter waits still: not done, said by the exit code
    assert "kept: not replayable" in capsys.readouterr().out
    assert [d.dlq_id for d in list_dead_letters(redis_client, settings)] == [letter.dlq_id]
    assert main(["dlq", "replay", "0-1"]) == 1
    assert "no dead letter 0-1" in capsys.readouterr().out
    assert main(["dlq", "replay"]) == 2


async def _wait(condition, timeout_s: float = 30.0) -> None:
    await eventually(condition, "condition", timeout_s=timeout_s)


class _Switch(httpx.AsyncBaseTransport):
    """Answers 503 UNAVAILABLE while ``on``; passes through to the fake otherwise."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner, self.on = inner, True

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.on:
            return httpx.Response(503, json={"status": "error", "error": {"code": "UNAVAILABLE", "message": "busy"}})
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("outage", ["down", "503"])
async def test_ov_down_acks_nothing_then_everything_is_written(redis_client, settings, fake_ov, outage):
    sessions = ["d0", "d1", "d2"]
    switch = _Switch(fake_ov.transport())
    if outage == "down":
        fake_ov.down = True
        switch.on = False
    worker = CaptureWorker(settings, ov_transport=switch, lease_ms=600)
    task = asyncio.create_task(worker.run())
    try:
        for t in range(5):
            publish(redis_client, settings, [turn(s, t) for s in sessions])
        # several failed rounds: the backoff has doubled at least twice
        await _wait(lambda: worker.stats.read == 15 and any(c.ov_failures >= 3 for c in worker.consumers.values()))
        assert pending_count(redis_client, settings) == 15  # nothing acked
        assert all(ov_texts(fake_ov, s) == [] for s in sessions)
        fake_ov.down = switch.on = False
        await _wait(lambda: all(len(ov_texts(fake_ov, s)) == 10 for s in sessions))
        await _wait(lambda: pending_count(redis_client, settings) == 0)
    finally:
        await stopped(worker, task)
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, 5)
    assert worker.stats.failures == 0 and list_dead_letters(redis_client, settings) == []


async def test_ov_answering_500_to_every_write_is_ov_failing_not_the_turns(redis_client, settings, fake_ov):
    """A server error for every session is OV failing: no failure counted, no dead letter, each
    session's turns in order once OV writes again."""
    sessions = [f"five{i}" for i in range(3)]
    publish(redis_client, settings, [turn(s, t) for t in range(4) for s in sessions])
    fake_ov.fail_next(4 * settings.max_deliveries + 4, status=500, code="INTERNAL", route="/messages/batch")
    worker = make_worker(settings, fake_ov)
    await run_until([worker], lambda: all(len(ov_texts(fake_ov, s)) == 8 for s in sessions), timeout_s=60)
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, 4)
    assert worker.stats.failures == 0 and list_dead_letters(redis_client, settings) == []


async def test_a_500_beside_writes_that_go_through_counts_against_its_entry(redis_client, settings, fake_ov):
    """The 500 that came beside a write that went through counts (it may be the entry's own);
    the ones it met alone after are OV failing and do not."""
    settings = settings.model_copy(update={"shards": 1})  # one round holds both sessions
    publish(redis_client, settings, [turn("bad500", 0), turn("good500", 0)])
    fake_ov.fail_next(settings.max_deliveries + 1, status=500, code="INTERNAL", route="/sessions/bad500/messages")
    worker = make_worker(settings, fake_ov)
    await run_until([worker], lambda: len(ov_texts(fake_ov, "bad500")) == 2, timeout_s=30)
    assert ov_texts(fake_ov, "good500") == expected_texts("good500", 1)
    assert ov_texts(fake_ov, "bad500") == expected_texts("bad500", 1)
    assert worker.stats.failures == 1 and list_dead_letters(redis_client, settings) == []


async def test_dead_letters_nobody_handled_expire_and_release_their_session(redis_client, settings, fake_ov):
    """``deadLetterMaxAgeS``: an old dead letter goes as ``dlq drop`` would (a parked session
    left with none is released and goes on) and is counted; a young one stays."""
    from workers.store.dead_letters import dead_letter_summary, expire_dead_letters

    fake_ov.fail_next(
        1 + settings.max_deliveries + 1, status=400, code="INVALID_ARGUMENT", route="/sessions/old/messages/batch"
    )
    publish(redis_client, settings, [turn("old", 0), turn("old", 1)])
    worker = make_worker(settings, fake_ov)
    await run_until([worker], lambda: len(list_dead_letters(redis_client, settings)) == 2, timeout_s=30)
    assert ov_texts(fake_ov, "old") == []  # parked behind its first turn
    summary = dead_letter_summary(redis_client, settings)
    assert summary.count == 2 and summary.oldest_ms is not None and summary.expired == 0

    young = time.time() + settings.dead_letter_max_age_s - 60
    assert expire_dead_letters(redis_client, settings, "w1", now=young) == 0  # not old enough yet
    redis_client.delete(Keys(settings.key_prefix).dead_letter_expiry())
    late = time.time() + settings.dead_letter_max_age_s + 1
    assert expire_dead_letters(redis_client, settings, "w1", now=late) == 2
    assert expire_dead_letters(redis_client, settings, "w2", now=late) == 0  # one process per interval
    summary = dead_letter_summary(redis_client, settings)
    assert (summary.count, summary.expired) == (0, 2)

    publish(redis_client, settings, [turn("old", 2)])  # released: the session goes on
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "old")[-2:] == ["old:q2", "old:a2"]
