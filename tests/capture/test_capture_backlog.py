"""A backlog never loses a turn: producers cap nothing, capture trims only what it applied.

The issue's scenario: capture stopped with its consumer group in place, thousands of turns
published over many sessions to one shard (far past the old 500-entry cap that dropped
5,000 of 6,000 messages), then capture back: every message in OV exactly once, for
afterTurn and commitTurn events, and the applied entries trimmed away afterwards.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from core.config import Settings
from core.events import CommitOutcome, TurnEvent, encode
from tests.helpers.capture import cli_uses, expected_texts, make_worker, ov_texts, pending_count, publish, turn
from workers.cli import main
from workers.cli.status import format_status
from workers.dev.fake_ov.app import FakeOV
from workers.dev.local_redis import start_redis_server
from workers.status import read_backlog, read_status
from workers.store.deployment import check_deployment
from workers.store.keys import Keys, shard_of
from workers.store.scripts import TRIM_APPLIED

SESSIONS = 20
TURNS = 150
"""20 sessions x 150 turns = 3,000 turn events, 6,000 messages, on one shard."""


def commit_turn(session: str, index: int) -> TurnEvent:
    """commitTurn's event: only the turn's own messages, with its advancement key."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"{session}:q{index}"},
        {"role": "assistant", "content": [{"type": "text", "text": f"{session}:a{index}"}]},
    ]
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=messages,
        pre_prompt_message_count=0,
        advancement_key=f"{session}:turn{index}",
        published_at=time.time(),
    )


def _backlog(kind: str) -> list[TurnEvent]:
    make = turn if kind == "afterTurn" else commit_turn
    return [make(f"s{s}", i) for i in range(TURNS) for s in range(SESSIONS)]


async def _capture_everything(client: redis.Redis, settings: Settings, fake: FakeOV) -> None:
    await make_worker(settings, fake, burst=True).run()
    assert pending_count(client, settings) == 0
    for s in range(SESSIONS):
        assert ov_texts(fake, f"s{s}") == expected_texts(f"s{s}", TURNS), f"session s{s}"


@pytest.mark.parametrize("kind", ["afterTurn", "commitTurn"])
async def test_a_backlog_far_past_the_old_cap_reaches_ov_whole(redis_client, settings, fake_ov, kind: str) -> None:
    settings = settings.model_copy(update={"shards": 1, "capture_batch": 500})
    await make_worker(settings, fake_ov, burst=True).run()  # the group exists; then capture is away
    publish(redis_client, settings, _backlog(kind))
    stream = Keys(settings.key_prefix).stream(0)
    assert redis_client.xlen(stream) == SESSIONS * TURNS  # nothing capped at publish
    await _capture_everything(redis_client, settings, fake_ov)
    assert redis_client.xlen(stream) < SESSIONS * TURNS // 2  # what capture applied is trimmed


async def test_the_backlog_is_visible_then_gone(redis_client, settings, fake_ov, monkeypatch, capsys) -> None:
    settings = settings.model_copy(update={"shards": 1})
    await make_worker(settings, fake_ov, burst=True).run()
    ids = publish(redis_client, settings, [turn(f"v{s}", 0) for s in range(5)])
    [shard] = read_backlog(redis_client, settings)
    assert (shard.length, shard.unread, shard.pending, shard.oldest_unapplied) == (5, 5, 0, ids[0])
    redis_client.xreadgroup(settings.consumer_group, "gone", {Keys(settings.key_prefix).stream(0): ">"}, count=2)
    [shard] = read_backlog(redis_client, settings)  # two delivered to a consumer that died: pending
    assert (shard.unread, shard.pending, shard.oldest_unapplied) == (3, 2, ids[0])

    cli_uses(monkeypatch, settings)
    monkeypatch.setenv("OVSTREAM_SHARDS", "1")
    assert main(["status", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["shards"]
    assert row["unread"] == 3 and row["pending"] == 2 and row["oldest_unapplied"] == ids[0]

    await make_worker(settings, fake_ov, burst=True).run()
    [shard] = read_backlog(redis_client, settings)
    assert (shard.unread, shard.pending, shard.oldest_unapplied) == (0, 0, None)
    assert main(["status"]) == 0
    table = capsys.readouterr().out
    assert "commits in flight: 0; dead letters: 0" in table
    assert "generation 0: 1 shards (created with: 1)" in table and "MISMATCH" not in table  # the worker recorded it
    assert ("(cluster), commit queue on" in table) is settings.redis_cluster
    assert main(["status", "--watch", "0.01", "--count", "3"]) == 0  # printed again each round
    assert capsys.readouterr().out.count("commits in flight: 0") == 3


async def test_status_shows_redis_memory_by_key_family(redis_client, settings, fake_ov, monkeypatch, capsys) -> None:
    from workers.store.memory import read_memory

    publish(redis_client, settings, [turn(f"mem{s}", 0) for s in range(6)])
    await make_worker(settings, fake_ov, burst=True).run()
    report = read_memory(redis_client, settings)
    assert report.complete and report.problem is None
    assert report.families["applied"].keys == 6 and report.families["snapshot"].keys == 6
    assert all(f.bytes > 0 for f in report.families.values())
    assert 0 <= report.oldest_state_idle_s < 60
    assert not read_memory(redis_client, settings, sample=3).complete  # a sample, said so

    cli_uses(monkeypatch, settings)
    monkeypatch.setenv("OVSTREAM_SHARDS", str(settings.shards))
    assert main(["status"]) == 0
    shown = capsys.readouterr().out
    assert "redis memory by key family (every key" in shown and "applied" in shown
    assert "oldest session state kept: idle" in shown and "sessionStateTtlS" in shown
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["families"]["applied"]["keys"] == 6
    assert main(["status", "--no-memory"]) == 0
    assert "redis memory" not in capsys.readouterr().out


async def test_a_backlog_survives_a_redis_restart(fake_ov) -> None:
    server = start_redis_server(durable=True)
    try:
        settings = Settings(redis_url=server.url, shards=1, capture_block_ms=50, capture_batch=500)
        client = redis.Redis.from_url(server.url)
        await make_worker(settings, fake_ov, burst=True).run()
        publish(client, settings, _backlog("afterTurn"))
        client.close()
        server.restart()  # SIGKILL, then start on the same append-only file
        client = redis.Redis.from_url(server.url)
        await _capture_everything(client, settings, fake_ov)
        client.close()
    finally:
        server.stop()


async def test_after_turn_events_fill_what_the_stream_lost(redis_client, settings, fake_ov) -> None:
    ids = publish(redis_client, settings, [turn("gappy", i) for i in range(10)])
    stream = Keys(settings.key_prefix).stream(shard_of("gappy", settings.shards))
    redis_client.xdel(stream, ids[2], ids[3], ids[7])  # lost (trimmed by an older producer, deleted by hand)
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "gappy") == expected_texts("gappy", 10)


# --- the trim itself: property over reads and acks ----------------------------------------------------


@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    total=st.integers(min_value=0, max_value=400),
    reads=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 120)), max_size=6),
    acks=st.data(),
    keep_tail=st.sampled_from([0, 5, 64]),
)
def test_the_trim_never_takes_an_unread_or_pending_entry(
    redis_url: str, total: int, reads: list[tuple[str, int]], acks: st.DataObject, keep_tail: int
) -> None:
    client = redis.Redis.from_url(redis_url)
    stream = f"trim:{uuid.uuid4().hex}"
    try:
        ids = [client.xadd(stream, {"e": b"x"}).decode() for _ in range(total)]
        client.xgroup_create(stream, "capture", "0", mkstream=True)
        delivered: list[str] = []
        for consumer, count in reads:
            reply = client.xreadgroup("capture", consumer, {stream: ">"}, count=count)
            delivered += [entry_id.decode() for entry_id, _ in (reply[0][1] if reply else [])]
        acked = set(acks.draw(st.lists(st.sampled_from(delivered), unique=True)) if delivered else [])
        if acked:
            client.xack(stream, "capture", *acked)
        TRIM_APPLIED(client, [stream], [keep_tail])
        left = {entry_id.decode() for entry_id, _ in client.xrange(stream)}
        must_stay = (set(ids) - acked) | set(ids[-keep_tail:] if keep_tail else [])
        assert must_stay <= left
    finally:
        client.delete(stream)
        client.close()


def test_status_counts_commit_jobs_and_the_last_hours_outcomes(redis_client, settings) -> None:
    stream = Keys(settings.key_prefix).commit_outcomes()
    hour_ago_ms = int(time.time() * 1000) - 3_700_000
    for entry_id, status in ((f"{hour_ago_ms}-0", "failed"), ("*", "completed"), ("*", "completed"), ("*", "timeout")):
        outcome = CommitOutcome(commit_id="c", ov_session_id="s", agent_id="main", status=status)
        redis_client.xadd(stream, {"o": encode(outcome)}, id=entry_id)
    status = read_status(redis_client, settings)
    assert status.outcomes_last_hour == {"completed": 2, "timeout": 1}  # the older failure is not counted
    assert status.commit_jobs == {"queued": 0, "scheduled": 0, "running": 0, "failed": 0, "polling": 0}
    assert "outcomes in the last hour: completed 2, timeout 1" in format_status(status)
    assert status.shards_recorded is None and "(created with: none yet)" in format_status(status)
    check_deployment(redis_client, settings.model_copy(update={"shards": 7}))  # a deployment of 7 shards
    mismatch = "generation 0: 7 shards (created with: 7)  <- MISMATCH: this process has shards = 4"
    assert mismatch in format_status(read_status(redis_client, settings))


async def test_a_stale_lag_counter_does_not_show_unread_entries(redis_client, settings, fake_ov) -> None:
    """A promoted replica's group can report a ``lag`` of dozens with nothing unread (its
    entries-read counter behind); status and the lag metric count from the stream itself."""
    settings = settings.model_copy(update={"shards": 1})
    publish(redis_client, settings, [turn(f"lag{s}", 0) for s in range(5)])
    await make_worker(settings, fake_ov, burst=True).run()
    stream = Keys(settings.key_prefix).stream(0)
    redis_client.execute_command("XGROUP", "SETID", stream, settings.consumer_group, "$", "ENTRIESREAD", 0)
    [group] = redis_client.xinfo_groups(stream)
    assert group["lag"] == 5  # what the stale counter says
    [shard] = read_backlog(redis_client, settings)
    assert (shard.unread, shard.pending, shard.oldest_unapplied) == (0, 0, None)
    publish(redis_client, settings, [turn("lag0", 1)])  # one really unread: shown, whatever lag says
    assert read_backlog(redis_client, settings)[0].unread >= 1
