"""Snapshots after batches and commits, never going back; ``ovstream up`` end to end."""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial

import httpx

from core.config import Settings
from core.ov.client import OVClient
from core.session import SessionAddress
from tests.helpers.capture import make_worker, publish, stored_snapshot, turn
from tests.helpers.waiting import wait_until
from workers.commits.records import CommitRecords
from workers.commits.request import request_commit
from workers.commits.worker import drain_jobs
from workers.store.applied import AppliedState
from workers.store.connection import connect, connect_async, reset_fake_server
from workers.store.snapshots import refresh_snapshot, snapshot_key


def _snap(client, settings, sid):
    return stored_snapshot(client, settings, SessionAddress(sid, "main", None))


async def test_each_batch_refreshes_the_snapshot(redis_client, settings, fake_ov):
    ids = publish(redis_client, settings, [turn("snap", t) for t in range(3)])
    seen = []
    await make_worker(settings, fake_ov, burst=True, on_snapshot=seen.append).run()
    snap = _snap(redis_client, settings, "snap")
    assert snap.applied_stream_id == ids[-1] and snap.captured_through == 6
    assert [m.text for m in snap.messages][-2:] == ["snap:q2", "snap:a2"]
    assert seen and seen[-1].applied_stream_id == ids[-1]
    ttl = redis_client.pttl(snapshot_key(settings, SessionAddress("snap", "main")))
    assert 0 < ttl <= settings.snapshot_ttl_s * 1000

    more = publish(redis_client, settings, [turn("snap", 3)])
    await make_worker(settings, fake_ov, burst=True).run()
    snap = _snap(redis_client, settings, "snap")
    assert snap.applied_stream_id == more[-1] and snap.captured_through == 8 and len(snap.messages) == 8


async def test_an_older_snapshot_never_replaces_a_newer_one(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn("order", 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    ov = OVClient.from_settings(settings, transport=fake_ov.transport()).scoped(peer="main")
    address = SessionAddress("order", "main")
    aredis = connect_async(settings)

    async def refresh(last_id: str, captured: int):
        read = partial(ov.get_context, "order", token_budget=settings.snapshot_token_budget)
        return await refresh_snapshot(
            aredis, settings, address, read, applied=AppliedState(last_id=last_id, captured=captured)
        )

    newest = await refresh("9000000000000-5", 2)
    assert _snap(redis_client, settings, "order").applied_stream_id == "9000000000000-5"
    for stale in ("8999999999999-9", "9000000000000-4", "1-0"):
        kept = await refresh(stale, 1)
        assert kept.applied_stream_id == "9000000000000-5" and kept.refreshed_at == newest.refreshed_at
    # same stream id: a read that began later (a commit's refresh) wins, an earlier one loses
    key = snapshot_key(settings, address)
    redis_client.hset(key, "fetched_ms", int(time.time() * 1000) + 60_000)
    kept = await refresh("9000000000000-5", 2)
    assert kept.refreshed_at == newest.refreshed_at
    redis_client.hset(key, "fetched_ms", 0)
    again = await refresh("9000000000000-5", 2)
    assert again.refreshed_at > newest.refreshed_at
    assert (await refresh("9000000000001-0", 3)).applied_stream_id == "9000000000001-0"


async def test_a_commit_refreshes_the_snapshot_at_the_applied_stream_id(redis_client, settings, fake_ov):
    ids = publish(redis_client, settings, [turn("cm", t) for t in range(3)])
    await make_worker(settings, fake_ov, burst=True).run()
    before = _snap(redis_client, settings, "cm")
    assert before.latest_archive_overview == "" and before.total_archives == 0
    request = request_commit(
        redis_client, settings, SessionAddress("cm", "main", None), reason="compact", keep_recent_count=0
    )
    done = lambda: CommitRecords(redis_client, settings).outcome(request).status == "completed"  # noqa: E731
    assert await asyncio.to_thread(drain_jobs, redis_client, settings, until=done)
    after = _snap(redis_client, settings, "cm")
    assert after.applied_stream_id == ids[-1] and after.captured_through == 6  # from the applied offset
    assert after.latest_archive_overview and after.total_archives == 1 and after.messages == []
    assert after.refreshed_at > before.refreshed_at


def test_ovstream_up_runs_capture_jobs_and_rpc_in_one_process():
    from workers.dev.up import run_up

    reset_fake_server()
    settings = Settings(
        redis_url="fakeredis://", key_prefix="up", capture_block_ms=50, phase2_poll_interval_s=0.01, compact_wait_s=20
    )
    started = threading.Event()
    box = {}

    def on_start(runtime) -> None:
        box["runtime"] = runtime
        started.set()

    thread = threading.Thread(
        target=lambda: asyncio.run(
            run_up(settings, fake_ov=True, host="127.0.0.1", port=0, started=on_start, install_signals=False)
        )
    )
    thread.start()
    try:
        assert started.wait(20)
        runtime = box["runtime"]
        redis = connect(settings)  # the same in-process server as every part of `up`
        [last] = publish(redis, settings, [turn("demo", 0)])
        wait_until(
            lambda: (snap := _snap(redis, settings, "demo")) is not None and snap.applied_stream_id == last,
            "capture refreshed the snapshot",
            timeout_s=20,
            interval_s=0.02,
        )
        answer = httpx.post(
            f"http://127.0.0.1:{runtime.port}/v1/compact", json={"sessionId": "demo"}, timeout=30
        ).json()
        assert answer["ok"] and answer["compacted"], answer
        assert runtime.fake_ov.sessions["demo"].archives
    finally:
        if "runtime" in box:
            box["runtime"].stop_threadsafe()
        thread.join(30)
        reset_fake_server()
    assert not thread.is_alive()
