"""A Redis that lost capture's newest writes (a failover promoted a lagging replica).

Redis replicates asynchronously: the promoted replica may lack the applied offset and the
intent of capture's last rounds, and its consumer group hands the same entries out again,
while OV holds their messages. Simulated on one real Redis: the session's applied hash and
the group's position are rolled back to what they were before the last turns were applied.
With ``publish_replicas`` (a deployment with replicas) capture checks OV's count and writes
nothing twice, whether the process that applied them goes on or another one takes over; the
control without it shows the test can fail.
"""

from __future__ import annotations

import pytest

from core.ids import ov_session_id
from tests.helpers.capture import (
    STEADY_LEASE_MS,
    expected_texts,
    kill_at,
    make_worker,
    ov_texts,
    pending_count,
    publish,
    run_until,
    turn,
)
from workers.capture.worker import WorkerKilled
from workers.store.applied import INTENT
from workers.store.keys import Keys, shard_of

SESSION = "lost"


@pytest.mark.parametrize(
    ("publish_replicas", "same_process", "twice"),
    [(1, True, False), (1, False, False), (0, True, True)],
    ids=["replicas-same-process", "replicas-new-process", "no-replicas-control"],
)
async def test_entries_handed_out_again_after_lost_writes_are_not_written_twice(
    redis_client, settings, fake_ov, publish_replicas: int, same_process: bool, twice: bool
) -> None:
    capture_settings = settings.model_copy(update={"publish_replicas": publish_replicas})
    keys = Keys(settings.key_prefix)
    shard = shard_of(SESSION, settings.shards)
    stream = keys.stream(shard)
    memory = make_worker(capture_settings, fake_ov).recorded  # what one process remembers

    async def capture(remembering: bool = True) -> None:
        """A burst of capture: a process that goes on (its memory), or a new one."""
        worker = make_worker(capture_settings, fake_ov, burst=True)
        if remembering:
            worker.recorded = memory
        await worker.run()

    [first] = publish(redis_client, settings, [turn(SESSION, 0)])
    await capture()
    [applied] = redis_client.keys(f"{settings.key_prefix}:*:applied:*:{ov_session_id(SESSION, None)}")
    before = redis_client.dump(applied)

    publish(redis_client, settings, [turn(SESSION, 1), turn(SESSION, 2)])
    await capture()
    assert ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 3)

    # the promoted replica: the applied state and the group's position of before turns 1 and 2
    redis_client.restore(applied, 0, before, replace=True)
    redis_client.xgroup_setid(stream, settings.consumer_group, first)

    await capture(remembering=same_process)
    written = ov_texts(fake_ov, SESSION)
    if twice:
        assert written == expected_texts(SESSION, 3) + expected_texts(SESSION, 3)[2:]
    else:
        assert written == expected_texts(SESSION, 3)
        publish(redis_client, settings, [turn(SESSION, 3)])
        await capture()  # and on from there, as before
        assert ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 4)


@pytest.mark.parametrize(
    ("publish_replicas", "twice"), [(1, False), (0, True)], ids=["replicas", "no-replicas-control"]
)
async def test_a_replica_that_kept_an_intent_but_not_the_rounds_after_it(
    redis_client, settings, fake_ov, publish_replicas: int, twice: bool
) -> None:
    """The replica's cut falls after the intent of turn 1's write, before its ack: the state
    it keeps holds that intent, and nothing of turn 2's round, whose messages OV holds too."""
    capture_settings = settings.model_copy(update={"publish_replicas": publish_replicas})
    stream = Keys(settings.key_prefix).stream(shard_of(SESSION, settings.shards))
    [first] = publish(redis_client, settings, [turn(SESSION, 0)])
    await make_worker(capture_settings, fake_ov, burst=True).run()
    [applied] = redis_client.keys(f"{settings.key_prefix}:*:applied:*:{ov_session_id(SESSION, None)}")

    publish(redis_client, settings, [turn(SESSION, 1)])
    killed = make_worker(capture_settings, fake_ov, burst=True, fault_hook=kill_at("before_ack", 1))
    with pytest.raises(WorkerKilled):
        await killed.run()
    await killed.close()
    with_intent = redis_client.dump(applied)
    assert redis_client.hget(applied, INTENT)  # the cut: turn 1 written, its intent kept, no ack

    publish(redis_client, settings, [turn(SESSION, 2)])
    # turn 1 settled once the killed worker's lease lapsed, turn 2 written
    heir = make_worker(capture_settings, fake_ov, lease_ms=STEADY_LEASE_MS)
    await run_until([heir], lambda: len(ov_texts(fake_ov, SESSION)) >= 6)
    assert ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 3)

    redis_client.restore(applied, 0, with_intent, replace=True)
    redis_client.xgroup_setid(stream, settings.consumer_group, first)
    await make_worker(capture_settings, fake_ov, burst=True, lease_ms=STEADY_LEASE_MS).run()
    written = ov_texts(fake_ov, SESSION)
    if twice:  # without replicas confirming publishes OV's surplus says nothing of turn 2
        assert written == expected_texts(SESSION, 3) + expected_texts(SESSION, 3)[4:]
    else:
        assert written == expected_texts(SESSION, 3)
        publish(redis_client, settings, [turn(SESSION, 3)])
        await make_worker(capture_settings, fake_ov, burst=True, lease_ms=STEADY_LEASE_MS).run()
        assert ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 4)


async def test_a_write_settled_from_its_intent_outside_the_round_is_not_written_again(
    redis_client, settings, fake_ov
) -> None:
    """The round that settles an intent may not hold the intent's entry (pending for a consumer
    that does not hold it, after a failover), only a copy the publisher sent again (no replica
    confirmed it in time: a new entry, the same event) and the next turn. What the settled entry
    wrote must count all the same: the intent records each entry's event and the session's
    captured count after it (the cluster failover tier wrote `q12 a12 q13 a13` after q12)."""
    capture_settings = settings.model_copy(update={"publish_replicas": 1})
    publish(redis_client, settings, [turn(SESSION, 0)])
    await make_worker(capture_settings, fake_ov, burst=True).run()
    again = turn(SESSION, 1)
    [first] = publish(redis_client, settings, [again])
    killed = make_worker(capture_settings, fake_ov, burst=True, fault_hook=kill_at("before_ack", 1))
    with pytest.raises(WorkerKilled):
        await killed.run()  # turn 1 in OV, its intent kept, no ack
    await killed.close()
    # the first copy out of the next round's sight (as one pending for a consumer that does not
    # hold it is, until its take-back): the round has the copy and the next turn only
    stream = Keys(settings.key_prefix).stream(shard_of(SESSION, settings.shards))
    redis_client.xack(stream, settings.consumer_group, first)
    publish(redis_client, settings, [again, turn(SESSION, 2)])  # the copy, then the next turn
    heir = make_worker(capture_settings, fake_ov)
    await run_until([heir], lambda: len(ov_texts(fake_ov, SESSION)) >= 6 and pending_count(redis_client, settings) == 0)
    assert ov_texts(fake_ov, SESSION) == expected_texts(SESSION, 3)
