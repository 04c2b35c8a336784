"""Never a stale snapshot served as current (issue: 168 sessions were sent 4 of their 10 messages).

Whatever fails between capture's OV write and the growth of the session's snapshot, assemble
never answers with fewer turns than capture applied, even once the stream no longer holds
them (trimmed) so the lag overlay cannot add them. Each case fails one step of a round once,
lets capture go on, trims the stream to nothing and asks assemble, several times.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from core.ov.client import OVError
from core.session import SessionAddress
from tests.helpers.capture import expected_texts, make_worker, ov_texts, pending_count, publish, run_until, turn
from workers.capture.worker import WorkerKilled
from workers.store.keys import Keys, shard_of
from workers.store.scripts import SNAPSHOT_BEHIND
from workers.store.snapshots import snapshot_key

SID = "behind"
MAIN_CALL = {"sessionId": SID, "messages": [], "prompt": "hi", "availableTools": [], "tokenBudget": 100_000}
"""The plugin's main assemble call (its own turns: none held, none recent)."""

FAULTS: list[tuple[str, type[BaseException]]] = [
    ("after_write", WorkerKilled),  # in OV, not acked: settled on redelivery
    ("before_ack", WorkerKilled),
    ("before_ack", redis.ConnectionError),  # Redis away at the ack
    ("after_ack", WorkerKilled),  # acked, no snapshot stored: nothing left to redeliver
    ("after_ack", redis.ConnectionError),
    ("before_snapshot", OVError),  # OV refuses the /context read a snapshot needs
    ("before_snapshot", WorkerKilled),
    ("before_snapshot_store", redis.ConnectionError),  # the snapshot's write does not reach Redis
    ("before_snapshot_store", WorkerKilled),
]


def _once(step: str, error: type[BaseException]) -> Any:
    fired: list[str] = []

    def hook(at: str) -> None:
        if at == step and not fired:
            fired.append(at)
            if error is OVError:
                raise OVError(500, "INTERNAL", "injected /context failure")
            raise error(f"injected at {at}")

    hook.fired = fired  # type: ignore[attr-defined]
    return hook


def _texts(answer: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for message in answer["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return out


@pytest.mark.parametrize(("step", "error"), FAULTS, ids=[f"{s}-{e.__name__}" for s, e in FAULTS])
async def test_no_answer_lacks_an_applied_turn_whatever_fails_before_the_snapshot_grows(
    redis_client, settings, fake_ov, make_rpc, step: str, error: type[BaseException]
) -> None:
    publish(redis_client, settings, [turn(SID, t) for t in range(3)])
    await make_worker(settings, fake_ov, burst=True).run()  # a snapshot of turns 0-2

    publish(redis_client, settings, [turn(SID, 3)])
    hook = _once(step, error)
    faulty = make_worker(settings, fake_ov, consumer="faulty", fault_hook=hook)
    await run_until([faulty], lambda: bool(hook.fired), timeout_s=20)
    heir = make_worker(settings, fake_ov, consumer="heir")
    await run_until([heir], lambda: len(ov_texts(fake_ov, SID)) == 8 and pending_count(redis_client, settings) == 0)
    assert ov_texts(fake_ov, SID) == expected_texts(SID, 4)  # once each, in order

    # the stream forgets the applied turns: only the snapshot (or OV) can show turn 3 now
    redis_client.xtrim(Keys(settings.key_prefix).stream(shard_of(SID, settings.shards)), maxlen=0)
    rpc = await make_rpc(fake_ov, key_prefix=settings.key_prefix, shards=settings.shards)
    for _ in range(3):
        response = await rpc.assemble(MAIN_CALL)
        assert response.status_code == 200, response.text
        assert [t for t in _texts(response.json()) if t.startswith(f"{SID}:")] == expected_texts(SID, 4)
    # read from OV once and stored: the mark is gone, later answers are snapshot hits
    stored = redis_client.hgetall(snapshot_key(settings, SessionAddress(SID, "main")))
    assert SNAPSHOT_BEHIND.encode() not in stored


async def test_a_snapshot_behind_its_mark_is_no_snapshot(redis_client, settings, fake_ov, make_rpc) -> None:
    """Without capture in the way: a stored snapshot older than the mark is read from OV again."""
    publish(redis_client, settings, [turn(SID, t) for t in range(2)])
    await make_worker(settings, fake_ov, burst=True).run()
    key = snapshot_key(settings, SessionAddress(SID, "main"))
    newer = "9999999999999-0"
    redis_client.hset(key, SNAPSHOT_BEHIND, newer)
    rpc = await make_rpc(fake_ov, key_prefix=settings.key_prefix, shards=settings.shards)
    fake_ov.calls.clear()
    response = await rpc.assemble(MAIN_CALL)
    assert response.status_code == 200
    assert any("/context" in path for _, path in fake_ov.calls)  # a miss: OV read
    # the refresh is tagged with the applied offset (older than the mark): still behind
    assert redis_client.hget(key, SNAPSHOT_BEHIND) == newer.encode()
    redis_client.hset(key, SNAPSHOT_BEHIND, "1-0")  # a mark the snapshot is past
    fake_ov.calls.clear()
    response = await rpc.assemble(MAIN_CALL)
    assert response.status_code == 200 and not any("/context" in path for _, path in fake_ov.calls)
