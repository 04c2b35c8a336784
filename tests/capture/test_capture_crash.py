"""At-least-once delivery, exactly-once effect: kill the worker anywhere, lose and repeat nothing."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.helpers.capture import (
    expected_texts,
    kill_at,
    make_worker,
    ov_texts,
    pending_count,
    publish,
    run_until,
    turn,
)
from workers.capture.worker import CaptureWorker, WorkerKilled
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys, shard_of

SESSIONS = [f"c{i}" for i in range(6)]


def all_in(fake, turns: int, sessions=SESSIONS, per_turn: int = 2):
    return lambda: all(len(ov_texts(fake, s)) >= per_turn * turns for s in sessions)


@pytest.mark.parametrize("step", ["before_write", "after_write", "before_ack"])
@pytest.mark.parametrize("occurrence", [1, 4])
async def test_a_kill_at_any_step_loses_and_repeats_nothing(redis_client, settings, fake_ov, step, occurrence):
    turns = 8
    for t in range(turns // 2):
        publish(redis_client, settings, [turn(s, t) for s in SESSIONS])
    victim = make_worker(settings, fake_ov, consumer="victim", fault_hook=kill_at(step, occurrence))
    [ended] = await run_until([victim], lambda: False, timeout_s=20)
    assert isinstance(ended, WorkerKilled)
    assert pending_count(redis_client, settings) > 0  # it died holding entries

    for t in range(turns // 2, turns):  # turns keep coming while nobody consumes
        publish(redis_client, settings, [turn(s, t) for s in SESSIONS])
    heir = make_worker(settings, fake_ov, consumer="heir")
    await run_until([heir], all_in(fake_ov, turns), timeout_s=30)
    for s in SESSIONS:
        assert ov_texts(fake_ov, s) == expected_texts(s, turns), s
    assert heir.stats.claimed > 0  # the victim's entries were claimed by the heir
    assert pending_count(redis_client, settings) == 0
    assert list_dead_letters(redis_client, settings) == []


class _KillingTransport(httpx.AsyncBaseTransport):
    """Kills the worker on the n-th batch write, after the earlier chunks were stored."""

    def __init__(self, inner: httpx.AsyncBaseTransport, kill_on: int) -> None:
        self.inner, self.kill_on, self.batches = inner, kill_on, 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/messages/batch"):
            self.batches += 1
            if self.batches == self.kill_on:
                raise WorkerKilled("killed between chunks")
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("kill_on", [2, 3, 5])
async def test_a_kill_between_chunks_of_one_write(redis_client, settings, fake_ov, kill_on):
    small = settings.model_copy(update={"ov_batch_max": 2})
    turns = 6
    publish(redis_client, small, [turn("chunky", t, per_turn=3) for t in range(turns)])  # 18 messages
    victim = CaptureWorker(
        small, ov_transport=_KillingTransport(fake_ov.transport(), kill_on), consumer="victim", lease_ms=600
    )
    [ended] = await run_until([victim], lambda: False, timeout_s=20)
    assert isinstance(ended, WorkerKilled)
    stored_before = len(ov_texts(fake_ov, "chunky"))
    assert stored_before == 2 * (kill_on - 1)  # an entry stored only in part, for odd cuts
    heir = make_worker(small, fake_ov, consumer="heir")
    await run_until([heir], all_in(fake_ov, turns, ["chunky"], per_turn=3), timeout_s=30)
    assert ov_texts(fake_ov, "chunky") == expected_texts("chunky", turns, per_turn=3)


async def test_steady_state_costs_one_ov_call_per_batch(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn("steady", 0)])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    fake_ov.calls.clear()
    publish(redis_client, settings, [turn("steady", t) for t in range(1, 4)])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    writes_and_reads = [c for c in fake_ov.calls if "/context" not in c[1]]
    assert writes_and_reads == [("POST", "/api/v1/sessions/steady/messages/batch")]
    assert ov_texts(fake_ov, "steady") == expected_texts("steady", 4)


async def test_a_redelivered_applied_entry_is_acked_not_written(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn("again", 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    stream = Keys(settings.key_prefix).stream(shard_of("again", settings.shards))
    # as if the ack had been lost: the entry is delivered once more
    redis_client.xgroup_setid(stream, settings.consumer_group, "0")
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert worker.stats.skipped == 1 and worker.stats.ov_writes == 0
    assert ov_texts(fake_ov, "again") == expected_texts("again", 1)


async def test_a_resent_commit_turn_is_deduped_by_advancement_key(redis_client, settings, fake_ov):
    first = turn("adv", 0, advancement_key="k-1")
    resent = turn("adv", 0, advancement_key="k-1")
    publish(redis_client, settings, [first])
    await make_worker(settings, fake_ov, burst=True).run()
    publish(redis_client, settings, [resent, turn("adv", 1, advancement_key="k-2")])
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "adv") == expected_texts("adv", 2)


async def test_workers_dying_on_an_entry_do_not_make_it_a_dead_letter(redis_client, settings, fake_ov):
    """A re-claim after a crash is no failure of the entry (docs/FAILURE-MODES.md, what counts):
    more crashes than ``maxDeliveries`` in a row, then a worker that lives applies it once."""

    def always(step: str) -> None:
        if step == "before_write":
            raise WorkerKilled("killed mid-round")

    publish(redis_client, settings, [turn("victim", 0)])
    for n in range(settings.max_deliveries + 2):
        victim = make_worker(settings, fake_ov, consumer=f"victim{n}", fault_hook=always)
        [ended] = await run_until([victim], lambda: False, timeout_s=20)
        assert isinstance(ended, WorkerKilled)
    survivor = make_worker(settings, fake_ov, consumer="survivor")
    await run_until([survivor], all_in(fake_ov, 1, ["victim"]), timeout_s=20)
    assert list_dead_letters(redis_client, settings) == []
    assert ov_texts(fake_ov, "victim") == expected_texts("victim", 1)
    assert pending_count(redis_client, settings) == 0


async def test_total_message_count_is_monotonic_across_commits(fake_ov):
    from core.ov.client import OVClient

    async with OVClient("http://ov", transport=fake_ov.transport()) as ov:
        await ov.add_messages(
            "mono", [{"role": "user", "parts": [{"type": "text", "text": f"m{i}"}]} for i in range(4)]
        )
        assert (await ov.get_session("mono")).total_message_count == 4
        await ov.commit("mono", keep_recent_count=1)
        state = await ov.get_session("mono")
        assert state.message_count == 1 and state.total_message_count == 4  # archived, still counted
        await ov.add_messages("mono", [{"role": "assistant", "parts": [{"type": "text", "text": "m4"}]}])
        assert (await ov.get_session("mono")).total_message_count == 5


async def test_a_commit_between_the_crash_and_the_redelivery_changes_nothing(redis_client, settings, fake_ov):
    from core.session import SessionAddress
    from workers.commits.records import CommitRecords
    from workers.commits.request import request_commit
    from workers.commits.worker import drain_jobs

    publish(redis_client, settings, [turn("arch", t) for t in range(3)])
    victim = make_worker(settings, fake_ov, consumer="victim", fault_hook=kill_at("before_ack", 1))
    [ended] = await run_until([victim], lambda: False, timeout_s=20)
    assert isinstance(ended, WorkerKilled) and len(ov_texts(fake_ov, "arch")) == 6
    request = request_commit(
        redis_client, settings, SessionAddress("arch", "main", None), reason="compact", keep_recent_count=0
    )
    done = lambda: CommitRecords(redis_client, settings).outcome(request).status == "completed"  # noqa: E731
    assert await asyncio.to_thread(drain_jobs, redis_client, settings, until=done)
    assert fake_ov.sessions["arch"].messages == []  # all archived before the redelivery
    publish(redis_client, settings, [turn("arch", 3)])
    heir = make_worker(settings, fake_ov, consumer="heir")
    await run_until([heir], all_in(fake_ov, 4, ["arch"]), timeout_s=30)
    assert ov_texts(fake_ov, "arch") == expected_texts("arch", 4)
