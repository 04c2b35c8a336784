"""Live resharding (core.shard_map, workers.store.shard_map): a running deployment changes its
number of turn streams, up and down, while turns keep coming; every session's turns reach OV
once each and in order.

The turns here are commitTurn events (each carries only its own two messages), so a turn
applied before an earlier one shows in OV as messages out of order: afterTurn events carry
the whole transcript and would hide it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from core.events import TurnEvent
from core.shard_map import ReshardRefused, ShardMap
from tests.helpers.capture import cli_uses, expected_texts, make_worker, ov_texts, run_until
from tests.helpers.waiting import eventually
from workers.capture.worker import WorkerKilled
from workers.cli import main
from workers.store.applied import parse_id
from workers.store.deployment import check_deployment
from workers.store.keys import Keys
from workers.store.scripts import PUBLISH_TURN
from workers.store.shard_map import GENERATION_FIELD, PREVIOUS_FIELD, STREAMS_FIELD, read_shard_map, reshard
from workers.store.streams import publish_call, publish_turn


def commit_turn(session: str, index: int) -> TurnEvent:
    """commitTurn ``index`` of ``session``: its own question and answer only."""
    return TurnEvent(
        event_id=f"{session}-{index}",
        session_id=session,
        messages=[
            {"role": "user", "content": f"{session}:q{index}"},
            {"role": "assistant", "content": [{"type": "text", "text": f"{session}:a{index}"}]},
        ],
        advancement_key=f"{session}:{index}",
        published_at=time.time(),
    )


def _in_order(fake_ov: Any, sessions: list[str], turns: int) -> bool:
    return all(ov_texts(fake_ov, s) == expected_texts(s, turns) for s in sessions)


def _stream_ids(redis_client: Any, stream: str) -> list[tuple[int, int]]:
    return [parse_id(i.decode()) for i, _ in redis_client.xrange(stream)]


async def test_resharding_up_then_down_under_load_keeps_every_sessions_order(redis_client, settings, fake_ov):
    check_deployment(redis_client, settings)
    sessions = [f"rs-{i}" for i in range(24)]
    turns = 30
    kills = {"left": 1}

    def die_once(step: str) -> None:  # the first worker dies mid-round, before its first ack (its
        # third, once: a loaded machine gave it fewer rounds, its batches larger)
        if step == "before_ack" and kills["left"] > 0:
            kills["left"] -= 1
            if kills["left"] == 0:
                raise WorkerKilled(step)

    workers = [
        make_worker(settings, fake_ov, consumer=f"w{i}", fault_hook=die_once if i == 0 else None) for i in range(3)
    ]
    maps: list[ShardMap] = []

    async def publisher() -> None:
        for index in range(turns):
            for s in sessions:
                publish_turn(redis_client, settings, commit_turn(s, index))
            await asyncio.sleep(0.01)
            if index == 8:  # up: 4 -> 8 streams while the first 9 turns are still being applied
                maps.append(reshard(redis_client, settings, 8))
            if index == 20:  # down again, once generation 0 retired
                await eventually(lambda: read_shard_map(redis_client, settings).previous is None, "gen 0 retired")
                maps.append(reshard(redis_client, settings, 4))

    pub = asyncio.create_task(publisher())

    def done() -> bool:
        return (
            pub.done()
            and _in_order(fake_ov, sessions, turns)
            and read_shard_map(redis_client, settings).previous is None
        )

    ended = await run_until(workers, done, timeout_s=90)
    await pub
    assert isinstance(ended[0], WorkerKilled) and ended[1:] == [None, None]
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, turns), s
    assert [(m.generation, m.shards) for m in maps] == [(1, 8), (2, 4)]
    final = read_shard_map(redis_client, settings)
    assert (final.generation, final.shards, final.previous) == (2, 4, None)
    keys = Keys(settings.key_prefix)
    retired = [keys.stream(old) for old in [*ShardMap(4).current(), *maps[0].current()]]
    # every retired stream is deleted: after the map forgets its generation (workers.store.shard_map.
    # finish_drain deletes them in that order), so a moment after "previous" is gone
    await eventually(lambda: not any(redis_client.exists(s) for s in retired), "the retired streams deleted")
    assert redis_client.xlen(keys.dead_letters()) == 0


async def test_a_new_stream_is_read_only_after_its_tags_old_streams_retire(redis_client, settings, fake_ov):
    check_deployment(redis_client, settings)
    sessions = [f"bar-{i}" for i in range(16)]
    for index in range(5):
        for s in sessions:
            publish_turn(redis_client, settings, commit_turn(s, index))
    new = reshard(redis_client, settings, 8)
    for index in range(5, 10):
        for s in sessions:
            publish_turn(redis_client, settings, commit_turn(s, index))
    keys = Keys(settings.key_prefix)
    for shard in new.current():  # the new streams' ids go on after the old ones' of the same tag
        olds = [i for s in new.predecessors(shard) for i in _stream_ids(redis_client, keys.stream(s))]
        news = _stream_ids(redis_client, keys.stream(shard))
        assert not olds or not news or min(news) > max(olds), shard
    moved = [s for s in sessions if new.stream_of(s).number >= 4]
    assert moved  # some sessions are on the new streams 4..7, whose tags' old streams are 0..3

    # A worker that may only take streams 4..7 never reads them: their old streams are not drained.
    only_new = make_worker(settings, fake_ov, consumer="only-new", shards=[4, 5, 6, 7])
    waited: list[bool] = []

    def some_ticks_blocked() -> bool:  # its consumers up and waiting, tick after tick
        waited.append(any(c.task is not None and not c.task.done() for c in only_new.consumers.values()))
        return sum(waited) > 20

    await run_until([only_new], some_ticks_blocked, timeout_s=30)
    assert any(waited)
    assert all(ov_texts(fake_ov, s) == [] for s in moved)

    # Everything else drains the old streams, then the new ones: each session in order.
    workers = [make_worker(settings, fake_ov, consumer=f"all-{i}") for i in range(2)]
    await run_until(workers, lambda: _in_order(fake_ov, sessions, 10), timeout_s=60)
    for s in sessions:
        assert ov_texts(fake_ov, s) == expected_texts(s, 10), s


def test_a_publisher_with_an_old_map_is_refused_and_the_publish_follows_the_new_one(redis_client, settings):
    check_deployment(redis_client, settings)
    old = read_shard_map(redis_client, settings)
    new = reshard(redis_client, settings, 8)
    event = commit_turn("late", 0)
    published, generation = PUBLISH_TURN(redis_client, *publish_call(settings, old, event))
    assert (int(published), generation) == (0, b"1")  # the closed stream takes nothing
    keys = Keys(settings.key_prefix)
    assert not redis_client.exists(keys.stream(old.stream_of("late")))
    publish_turn(redis_client, settings, event)
    assert redis_client.xlen(keys.stream(new.stream_of("late"))) == 1


async def test_a_reshard_that_stopped_before_closing_its_tags_is_finished_by_capture(redis_client, settings, fake_ov):
    check_deployment(redis_client, settings)
    keys = Keys(settings.key_prefix)
    # what `ovstream reshard` writes first; it died before closing any tag
    redis_client.hset(keys.deployment(), mapping={GENERATION_FIELD: 1, STREAMS_FIELD: 8, PREVIOUS_FIELD: "0.4"})
    worker = make_worker(settings, fake_ov, consumer="finisher")
    try:
        await worker._tick(acquire=False)
    finally:
        await worker.close()
    assert [redis_client.get(keys.tag_generation(t)) for t in range(4)] == [b"1"] * 4
    publish_turn(redis_client, settings, commit_turn("after", 0))  # goes through at once
    assert redis_client.xlen(keys.stream(read_shard_map(redis_client, settings).stream_of("after"))) == 1


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([6], "must be a multiple of 4"),
        ([2], "must be a multiple of 4"),
        ([4], "already runs 4 shards"),
        ([8, 16], "generation 0 (4 shards) is still draining"),
    ],
)
def test_a_reshard_that_cannot_start_says_why(redis_client, settings, steps, problem):
    check_deployment(redis_client, settings)
    for shards in steps[:-1]:
        reshard(redis_client, settings, shards)
    with pytest.raises(ReshardRefused, match=problem.replace("(", r"\(").replace(")", r"\)")):
        reshard(redis_client, settings, steps[-1])


def test_the_cli_reshards_and_refuses_with_exit_2(redis_client, settings, monkeypatch, capsys):
    cli_uses(monkeypatch, settings)
    assert main(["reshard", "--shards", "12"]) == 0
    assert "generation 1: 12 shards" in capsys.readouterr().out
    assert main(["reshard", "--shards", "8"]) == 2
    assert "still draining" in capsys.readouterr().err
    assert main(["status"]) == 0
    assert "generation 1: 12 shards, generation 0 (4 shards) draining" in capsys.readouterr().out


@pytest.mark.parametrize("deleted", ["before-the-read", "between-xpending-and-xinfo"])
async def test_an_old_stream_retired_while_being_taken_over_is_released_quietly(
    redis_client, settings, fake_ov, monkeypatch, deleted
):
    """A reshard under load: one consumer retires (and deletes) an old generation's stream just
    as another, whose map is a moment behind, takes it over. Nothing is left in it to apply:
    the second lets it go, with no crash and no traceback (it used to crash on NOGROUP, and,
    deleted between its drain's XPENDING and XINFO CONSUMERS, on "no such key": a loaded run's
    live reshard on a cluster)."""
    from workers.capture.shard import ShardConsumer

    check_deployment(redis_client, settings)
    old = read_shard_map(redis_client, settings).current()[3]
    worker = make_worker(settings, fake_ov, consumer="late")
    await worker.ensure_group(old)
    worker.shard_map = reshard(redis_client, settings, 8)  # the map it follows has moved on
    stream = Keys(settings.key_prefix).stream(old)
    if deleted == "before-the-read":
        redis_client.delete(stream)  # retired by its previous holder

        async def no_group(_shard: Any) -> None:  # its group check ran just before the deletion
            return None

        monkeypatch.setattr(worker, "ensure_group", no_group)
    else:
        xinfo_consumers = worker.redis.xinfo_consumers

        async def retired_first(*args: Any) -> Any:
            redis_client.delete(stream)
            return await xinfo_consumers(*args)

        monkeypatch.setattr(worker.redis, "xinfo_consumers", retired_first)
    consumer = ShardConsumer(worker, old, "")
    await consumer.run()  # would raise ResponseError NOGROUP, or "no such key"
    assert consumer.released and not consumer.lost
    await worker.redis.aclose()
