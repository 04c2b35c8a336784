"""Snapshot versions kept in the RPC process (workers.store.versions): an answer is used only
while Redis tracks its keys for us, and dropped as soon as Redis says a key changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from core.config import Settings
from tests.helpers.waiting import eventually
from workers.store import versions as versions_module
from workers.store.connection import connect_async
from workers.store.versions import SnapshotVersions, _entry_bytes

SNAP = "ovstream:{s1}:snapshot:-.main:sess"
TURN = "ovstream:{s1}:last-turn:sess"


@pytest.fixture
async def versions(redis_url: str) -> AsyncIterator[SnapshotVersions]:
    settings = Settings(redis_url=redis_url)
    kept = SnapshotVersions(connect_async(settings), settings)
    kept.start()
    await eventually(lambda: kept.live, "the watch connection subscribed")
    yield kept
    await kept.stop()
    await kept.client.aclose()


def _writer(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


async def _reads(versions: SnapshotVersions) -> Any:
    return await versions.read(SNAP, TURN)


async def test_a_kept_answer_is_used_and_dropped_when_either_key_changes(versions, redis_url) -> None:
    writer = _writer(redis_url)
    writer.delete(SNAP, TURN)
    first = await _reads(versions)
    assert (await _reads(versions), versions.hits) == (first, 1)  # kept: no Redis call
    writer.hset(SNAP, mapping={"id": "5-0", "fetched_ms": 7, "data": "{}"})
    await eventually(lambda: _shows(versions, 0, b"5-0"), "the new snapshot seen")
    assert (await _reads(versions))[:3] == [b"5-0", b"7", 2]
    writer.set(TURN, "turn-9")
    await eventually(lambda: _shows(versions, 3, b"turn-9"), "the new last turn seen")
    hits = versions.hits
    await _reads(versions)
    assert versions.hits == hits + 1  # kept again once read after the change
    writer.close()


async def _shows(versions: SnapshotVersions, field: int, value: bytes) -> bool:
    return bool((await _reads(versions))[field] == value)


async def test_an_answer_read_while_a_key_changes_is_not_kept(versions, redis_url, monkeypatch) -> None:
    writer = _writer(redis_url)
    writer.set(TURN, "old")
    real = versions_module.SNAPSHOT_VERSION.run
    seen = versions._invalidations

    async def read_then_write(client: Any, keys: Any, args: Any) -> Any:
        answer = await real(client, keys, args)  # the old answer...
        writer.set(TURN, "new")  # ...and a write it missed, before it is back
        await eventually(lambda: versions._invalidations > seen, "the invalidation delivered")
        return answer

    monkeypatch.setattr(versions_module.SNAPSHOT_VERSION, "run", read_then_write)
    assert (await _reads(versions))[3] == b"old"
    monkeypatch.setattr(versions_module.SNAPSHOT_VERSION, "run", real)
    assert (await _reads(versions))[3] == b"new"  # not the kept "old": it was never kept
    writer.close()


async def test_nothing_kept_is_used_while_the_watch_is_down_and_it_comes_back(versions, redis_url) -> None:
    writer = _writer(redis_url)
    await _reads(versions)
    await _reads(versions)
    assert versions.hits == 1
    watch = [c for c in writer.client_list() if c.get("name") == versions.watch_name]  # not another test's
    assert len(watch) == 1 and "t" in watch[0]["flags"]  # the watch, tracking
    writer.client_kill_filter(_id=watch[0]["id"])
    await eventually(lambda: not versions.live, "the watch seen gone")
    writer.set(TURN, "while-down")  # no one tells us: nothing kept may be used
    assert (await _reads(versions))[3] == b"while-down"
    assert versions.hits == 1
    await eventually(lambda: versions.live, "the watch back", timeout_s=10)
    await _reads(versions)
    await _reads(versions)
    assert versions.hits == 2
    writer.close()


async def test_a_watch_that_stops_answering_is_taken_for_gone(versions, redis_url) -> None:
    writer = _writer(redis_url)
    await _reads(versions)
    writer.execute_command("CLIENT", "PAUSE", 4000, "ALL")  # Redis answers no one, pings included
    try:
        await eventually(lambda: not versions.live, "the silent watch given up", timeout_s=10)
    finally:
        writer.execute_command("CLIENT", "UNPAUSE")
    await eventually(lambda: versions.live, "the watch back", timeout_s=10)
    writer.close()


def test_a_cluster_or_the_embedded_redis_is_not_tracked(redis_url) -> None:
    embedded = Settings(redis_url="fakeredis://")
    assert not SnapshotVersions(connect_async(embedded), embedded).tracks
    assert SnapshotVersions(connect_async(Settings(redis_url=redis_url)), Settings(redis_url=redis_url)).tracks


async def test_a_user_not_allowed_client_tracking_gets_every_answer_from_redis(redis_url) -> None:
    admin = _writer(redis_url)
    admin.execute_command("ACL", "SETUSER", "no-tracking", "on", ">pw", "~*", "+@all", "-client")
    try:
        host_port = redis_url.split("//", 1)[1]
        settings = Settings(redis_url=f"redis://no-tracking:pw@{host_port}")
        kept = SnapshotVersions(connect_async(settings), settings)
        kept.start()
        await eventually(lambda: kept._task is not None and kept._task.done(), "the watch given up for good")
        assert kept._task is not None and kept._task.exception() is None
        admin.set(TURN, "t1")
        assert (await kept.read(SNAP, TURN))[3] == b"t1"
        assert (await kept.read(SNAP, TURN), kept.hits, kept.live) == ([None, None, 0, b"t1"], 0, False)
        await kept.stop()
        await kept.client.aclose()
    finally:
        admin.execute_command("ACL", "DELUSER", "no-tracking")
        admin.close()


async def test_a_new_turn_drops_the_kept_answer_of_every_agent_of_the_session(versions, redis_url) -> None:
    writer = _writer(redis_url)
    other = "ovstream:{s1}:snapshot:-.other-agent:sess"  # the same OV session as another agent sees it
    writer.delete(SNAP, other, TURN)
    for snapshot in (SNAP, other, SNAP, other):
        await versions.read(snapshot, TURN)
    assert versions.hits == 2
    writer.set(TURN, "turn-2")
    await eventually(lambda: _shows(versions, 3, b"turn-2"), "the new turn seen by the main agent")
    assert (await versions.read(other, TURN))[3] == b"turn-2"  # and by the other one
    writer.close()


def test_kept_answers_are_bounded_by_bytes() -> None:
    one = _entry_bytes("snap-0", "turn", [b"1-0", b"17", 9, b"t"])
    kept = SnapshotVersions(connect_async(Settings()), Settings(), max_bytes=2 * one)
    for i in range(5):
        kept._keep(f"snap-{i}", "turn", [b"1-0", b"17", 9, b"t"])
    assert list(kept._kept) == ["snap-3", "snap-4"] and kept._owners == {"turn": {"snap-3", "snap-4"}}
    assert kept.bytes == 2 * one
    kept._keep("snap-4", "turn", [b"1-0", b"17", 9, b"t" * 2 * one])  # one larger answer pushes out the rest
    assert list(kept._kept) == [] and kept.bytes == 0 and not kept._owners
    kept._keep("snap-5", "turn", [b"1-0", b"17", 9, b"t"])
    kept.invalidate([b"turn"])
    assert not kept._kept and not kept._owners and kept.bytes == 0
