"""assemble's own bounds: an answer within assembleTimeoutS on every path, one OV read
per missing snapshot at a time, and a session OV lacks remembered for a while."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from core.session import SessionAddress
from tests.helpers.capture import stored_snapshot
from tests.helpers.waiting import eventually
from tests.rpc.test_assemble import SID, context_reads, main_call, oc_turns, ov_turns, recall_call
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.context import MissingSessions
from workers.store.snapshots import refresh_snapshot

pytestmark = pytest.mark.redis

ADDRESS = SessionAddress(SID, "main", None)


async def test_slow_ov_on_a_miss_passes_through_and_the_read_still_lands(make_rpc: Any, fake: FakeOV) -> None:
    # the call gives up while OV's read is under way: a second is the Redis reads' before it (a
    # loaded run's took over 0.2 s once, so the call gave up before the read began: none to land)
    rpc = await make_rpc(fake, assemble_timeout_s=1.0)
    await rpc.ov.add_messages(SID, ov_turns("what is ovstream", "a context engine"))
    rpc.mark_captured(SID, 2)
    fake.latency_s = {"get_context": 3.0}
    messages = oc_turns("what is ovstream", "a context engine")
    r = await rpc.assemble(main_call(messages))
    assert r.status_code == 200 and r.json()["messages"] == messages  # passthrough: OV was too slow
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, 'ovstream_assemble_results_total{path="full",reason="assemble_timeout"}') == 1.0
    # The read the call gave up on goes on and stores the snapshot: the next call hits.
    await eventually(lambda: stored_snapshot(rpc.redis, rpc.settings, ADDRESS), "the snapshot stored")
    again = await rpc.assemble(main_call(messages))
    assert len(again.json()["messages"]) == 2 and context_reads(fake) == 1


async def test_slow_recall_is_bounded_by_the_assemble_timeout(make_rpc: Any, fake: FakeOV) -> None:
    fake.seed_memory("User prefers Rust for backend services.")
    fake.latency_s = {"find": 30.0}
    rpc = await make_rpc(fake, assemble_timeout_s=0.2, recall_timeout_s=20.0)
    call = recall_call("which backend language?")
    r = await rpc.assemble(call)
    assert r.status_code == 200 and r.json()["messages"] == call["messages"]
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, 'ovstream_assemble_results_total{path="recall",reason="assemble_timeout"}') == 1.0


async def test_concurrent_misses_share_one_ov_read(make_rpc: Any, fake: FakeOV) -> None:
    rpc = await make_rpc(fake)
    await rpc.ov.add_messages(SID, ov_turns("hello", "hi"))
    rpc.mark_captured(SID, 2)
    fake.latency_s = {"get_context": 0.2}
    answers = await asyncio.gather(*(rpc.assemble(main_call(oc_turns("hello", "hi"))) for _ in range(5)))
    assert {len(a.json()["messages"]) for a in answers} == {2}
    assert context_reads(fake) == 1


async def test_a_session_ov_lacks_is_remembered_for_a_while(rpc: Any) -> None:
    now = [1000.0]
    rpc.app.state.services.missing = MissingSessions(3.0, clock=lambda: now[0])
    messages = oc_turns("first message of a new user")
    for _ in range(3):
        r = await rpc.assemble(main_call(messages))
        assert r.json()["messages"] == messages
    assert context_reads(rpc.fake) == 1
    now[0] += 3.0
    await rpc.assemble(main_call(messages))
    assert context_reads(rpc.fake) == 2


async def test_capture_ends_the_memory_of_a_missing_session(rpc: Any) -> None:
    messages = oc_turns("hello", "hi")
    await rpc.assemble(main_call(messages))  # OV has no such session: remembered
    await rpc.ov.add_messages(SID, ov_turns("hello", "hi"))
    rpc.mark_captured(SID, 2)
    read = partial(rpc.ov.get_context, SID, token_budget=rpc.settings.snapshot_token_budget)
    await refresh_snapshot(rpc.app.state.services.redis, rpc.settings, ADDRESS, read)  # as capture does
    r = await rpc.assemble(main_call(messages))
    assert len(r.json()["messages"]) == 2
