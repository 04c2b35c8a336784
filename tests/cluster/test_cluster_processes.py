"""ovstream's processes on a real Redis Cluster, faults injected under load.

Three durable cluster masters of this module's own (one is SIGKILLed and started again), the
RQ queue on the plain ``redis_server``, the FakeOV served over HTTP, and ``ovstream capture``
(two), ``worker`` and ``rpc`` as separate processes. While turns are published, a capture
process, the worker and a cluster master are SIGKILLed in turn; afterwards every session holds
every turn once, in order, every commit is final, nothing is dead-lettered, and the RPC
process assembles from the cluster. Each fault's recovery is printed.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.session import shard_of
from tests.helpers.chaos import Deployment, Ledger, Load, expected_ids, measure
from tests.helpers.e2e import ovstream_command, unique
from tests.helpers.fake_ov_process import answers
from tests.helpers.waiting import wait_until
from workers.dev.local_redis import RedisClusterServers, free_port, start_redis_cluster
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys
from workers.store.shard_map import read_shard_map

SESSIONS = [f"cl{i}" for i in range(8)]
RATE = 30.0
RECOVERY_DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def durable_cluster() -> Iterator[RedisClusterServers]:
    cluster = start_redis_cluster(masters=3, durable=True)
    try:
        yield cluster
    finally:
        cluster.stop()


def _deployment(cluster: RedisClusterServers, queue_url: str, ov_url: str, **extra: Any) -> dict[str, Any]:
    """Settings of a deployment on ``cluster`` (its commit queue on ``queue_url``), fast timings."""
    return {
        "base_url": ov_url,
        "redis_url": cluster.url,
        "redis_cluster": True,
        "queue_redis_url": queue_url,
        "key_prefix": unique("cl"),
        "shards": 4,
        "capture_block_ms": 100,
        "phase2_poll_interval_s": 0.05,
        **extra,
    }


def _node_of_shard(cluster: RedisClusterServers, ledger: Ledger, shard: int) -> int:
    """Which of the cluster's nodes serves ``shard``'s stream."""
    node = ledger.redis.get_node_from_key(Keys(ledger.settings.key_prefix).stream(shard))  # type: ignore[attr-defined]
    return next(i for i, n in enumerate(cluster.nodes) if n.port == int(node.port))


def test_faults_on_a_cluster_lose_repeat_and_reorder_nothing(
    durable_cluster: RedisClusterServers, redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    port = free_port()
    values = _deployment(
        durable_cluster,
        redis_url,
        fake_ov_url,
        shards=8,
        capture_lease_ms=3000,
        commit_token_threshold=1200,
        commit_keep_recent_count=4,
        rpc_port=port,
    )
    deploy = Deployment(values, tmp_path)
    ledger = Ledger(deploy.settings, fake_ov_url, SESSIONS)
    figures: dict[str, float] = {}
    try:
        for name in ("capture-a", "capture-b", "worker", "rpc"):
            deploy.start(name)
        load = Load(deploy.settings, SESSIONS, RATE).start()

        def recover(fault: str, inject: Callable[[], None]) -> None:
            assert load.running(), f"{fault}: the load ended before the fault"
            inject()
            ended = time.monotonic()
            time.sleep(1.0)
            marks = load.marks()
            measure(lambda: ledger.caught_up(marks), timeout_s=RECOVERY_DEADLINE_S, what=f"{fault}: capture")
            figures[fault] = time.monotonic() - ended
            assert not deploy.exited(), {n: deploy.log(n) for n in deploy.exited()}

        def kill_master() -> None:
            node = durable_cluster.nodes[_node_of_shard(durable_cluster, ledger, shard_of(SESSIONS[0], 8))]
            node.kill()
            time.sleep(2.0)  # its slots are down meanwhile: publishers and capture wait
            node.restart()
            durable_cluster.wait_ok()

        time.sleep(2.0)
        recover("capture SIGKILL", lambda: deploy.restart("capture-a"))
        recover("worker SIGKILL", lambda: deploy.restart("worker"))
        recover("cluster master SIGKILL + restart", kill_master)
        turns = load.finish(timeout_s=RECOVERY_DEADLINE_S)
        measure(lambda: ledger.caught_up(load.marks()), timeout_s=RECOVERY_DEADLINE_S, what="the last turns applied")
        measure(lambda: not ledger.unsettled(), timeout_s=RECOVERY_DEADLINE_S, what="every commit final")

        for session in SESSIONS:  # 0 lost, 0 twice, in order, across commits
            assert ledger.ov_ids(session) == expected_ids(session, turns), session
        commits = [o for s in SESSIONS for o in ledger.commits(s)]
        assert len(commits) >= len(SESSIONS)
        unfinished = [(o.commit_id, o.status, o.error) for o in commits if o.status not in ("completed", "skipped")]
        assert unfinished == [], deploy.log("worker", lines=300)
        assert list_dead_letters(ledger.redis, deploy.settings) == []

        rpc = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers(f"{rpc}/healthz"), "the RPC answering", timeout_s=30)
        body = {"sessionId": SESSIONS[0], "messages": [], "prompt": "next"}
        r = httpx.post(f"{rpc}/v1/assemble", json=body, timeout=10)
        assert r.status_code == 200, r.text
        # the session's context, from its snapshot on the cluster: its newest turn included
        assert f"{SESSIONS[0]}:a{turns - 1} " in json.dumps(r.json()["messages"]), r.text[:2000]
        for name in ("capture-a", "capture-b", "worker", "rpc"):
            assert "Traceback" not in deploy.log(name, lines=100_000), deploy.log(name)
        print(f"\ncluster: {len(SESSIONS)} sessions x {turns} turns, {len(commits)} commits, {load.resends} resent")
        for fault, seconds in figures.items():
            print(f"{fault:<34} capture caught up {seconds:5.1f} s after")
    finally:
        ledger.close()
        deploy.stop()


def test_processes_started_while_the_cluster_is_down_wait_for_it(
    durable_cluster: RedisClusterServers, redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    deploy = Deployment(_deployment(durable_cluster, redis_url, fake_ov_url, commit_token_threshold=400), tmp_path)
    for node in durable_cluster.nodes:
        node.kill()
    try:
        deploy.start("capture")
        deploy.start("worker")
        wait_until(lambda: "waiting for Redis" in deploy.log("capture"), "capture waiting for the cluster")
        wait_until(lambda: "waiting for Redis" in deploy.log("worker"), "the worker waiting for the cluster")
        for node in durable_cluster.nodes:
            node.restart()
        durable_cluster.wait_ok()
        ledger = Ledger(deploy.settings, fake_ov_url, ["late"])
        load = Load(deploy.settings, ["late"], rate=20).start()
        time.sleep(1.5)
        turns = load.finish(timeout_s=30)
        measure(lambda: ledger.caught_up(load.marks()), timeout_s=30, what="the turns applied")
        measure(lambda: bool(ledger.commits("late")) and not ledger.unsettled(), timeout_s=30, what="commits final")
        assert ledger.ov_ids("late") == expected_ids("late", turns)  # archived and active, in order
        statuses = {o.status for o in ledger.commits("late")}
        assert "completed" in statuses and statuses <= {"completed", "skipped"}, statuses
        assert deploy.exited() == {}, {n: deploy.log(n) for n in deploy.exited()}
        ledger.close()
    finally:
        for node in durable_cluster.nodes:
            if node.proc.poll() is not None:
                node.restart()
        deploy.stop()


def _reshard(deploy: Deployment, shards: int, *, wait: bool) -> str:
    """``ovstream reshard`` as an operator runs it; its output (the test fails on an error)."""
    done = subprocess.run(
        [*ovstream_command(), "reshard", "--shards", str(shards), *(["--wait"] if wait else [])],
        env=deploy.env,
        capture_output=True,
        text=True,
        timeout=RECOVERY_DEADLINE_S * 2,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_live_reshard_on_a_cluster_under_load_loses_and_repeats_nothing(
    durable_cluster: RedisClusterServers, redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    values = _deployment(durable_cluster, redis_url, fake_ov_url, capture_lease_ms=3000, commit_token_threshold=1200)
    deploy = Deployment(values, tmp_path)
    ledger = Ledger(deploy.settings, fake_ov_url, SESSIONS)
    try:
        for name in ("capture-a", "capture-b", "worker"):
            deploy.start(name)
        load = Load(deploy.settings, SESSIONS, RATE).start()
        time.sleep(2.0)
        assert "generation 1: 8 shards" in _reshard(deploy, 8, wait=False)
        time.sleep(0.5)
        deploy.restart("capture-a")  # SIGKILLed while generation 0 drains into generation 1
        wait_until(
            lambda: read_shard_map(ledger.redis, deploy.settings).previous is None,
            "generation 0 retired",
            timeout_s=RECOVERY_DEADLINE_S,
        )
        assert load.running(), "the load ended before the second reshard"
        assert "retired" in _reshard(deploy, 4, wait=True)  # and back down, still under load
        turns = load.finish(timeout_s=RECOVERY_DEADLINE_S)
        wait_until(
            lambda: all(ledger.ov_ids(s) == expected_ids(s, turns) for s in SESSIONS),
            "every turn in OV",
            timeout_s=RECOVERY_DEADLINE_S,
        )
        measure(lambda: not ledger.unsettled(), timeout_s=RECOVERY_DEADLINE_S, what="every commit final")
        final = read_shard_map(ledger.redis, deploy.settings)
        assert (final.generation, final.shards, final.previous) == (2, 4, None)
        for session in SESSIONS:  # 0 lost, 0 twice, in order, across commits
            assert ledger.ov_ids(session) == expected_ids(session, turns), session
        assert list_dead_letters(ledger.redis, deploy.settings) == []
        for name in ("capture-a", "capture-b", "worker"):
            assert "Traceback" not in deploy.log(name, lines=100_000), deploy.log(name)
        print(
            f"\nlive reshard 4 -> 8 -> 4 on a cluster: {len(SESSIONS)} sessions x {turns} turns, {load.resends} resent"
        )
    finally:
        ledger.close()
        deploy.stop()
