"""A Redis Cluster failover's side effects on capture (3 masters, one replica each).

Under load (turns published by a thread, two ``ovstream capture`` processes, the FakeOV over
HTTP), a master is SIGKILLed and its replica promoted, the old master rejoins as a replica, and
then takes its place back with ``CLUSTER FAILOVER TAKEOVER``. What the test holds capture to:

- a dead master stalls only its own shards: a turn published to another master's shard
  well after the kill (longer than a lease) is applied before the replica takes over;
- once drained, ``ovstream status`` (and the lag metric, from the same read) shows nothing
  unread, whatever the promoted replica's group counters say;
- a planned takeover logs no crash and no traceback (the blocked reads it unblocks are a
  failover, not a consumer's bug);
- the RPC answers every assemble meanwhile, never with a 5xx and never with a turn twice;
- with ``publish_replicas = 1`` every acknowledged turn in OV once and in order; with 0 the
  turns a failover lost and those capture wrote twice (its newest records lost with them) are
  counted and printed, what is kept in order (the README's table of what each promises);
- commits side by side meanwhile (a commit worker, sessions crossing the threshold, and a
  manual commit of every session asked for just before the kill): every commit asked for
  before the kill is final within ``COMMITS_AFTER_PROMOTION_S`` of the promotion, and while
  any waits longer than ``COMMIT_STALL_S``, ``ovstream status`` shows it (the oldest commit
  in flight and its age);
- no dead letter, no process exited, no traceback and no "quitting" in any process's log;
  the longest publish and assemble pauses are printed.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.job import Job, JobStatus

from core.session import SessionAddress, shard_of
from tests.cluster.test_cluster_processes import _deployment
from tests.helpers.chaos import Assembles, Deployment, Ledger, Load, chaos_turn, expected_ids, measure
from tests.helpers.fake_ov_process import answers
from tests.helpers.waiting import wait_until
from workers.commits.api import commit_queue, job_counts
from workers.commits.records import FINAL_STATUSES
from workers.commits.request import request_commit
from workers.dev.local_redis import RedisClusterServers, RedisServer, free_port, start_redis_cluster
from workers.status import COMMIT_STALL_S, read_backlog, read_status
from workers.store.connection import REDIS_ERRORS, connect
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys
from workers.store.streams import publish_turn

SESSIONS = [f"fo{i}" for i in range(8)]
SHARDS = 8
RATE = 20.0
LEASE_MS = 3000
NODE_TIMEOUT_MS = 9000
"""How long the cluster waits before promoting a dead master's replica: long enough that a
capture stalled by the dead master alone would show (its leases lapse after LEASE_MS)."""
DEADLINE_S = 90.0
COMMITS_AFTER_PROMOTION_S = 60.0
"""The issue's bound: every commit asked for before the kill is final this soon after the promotion."""


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[RedisClusterServers]:
    cluster = start_redis_cluster(masters=3, replicas=1, durable=True, node_timeout_ms=NODE_TIMEOUT_MS)
    try:
        yield cluster
    finally:
        cluster.stop()


def _node(cluster: RedisClusterServers, port: int) -> RedisServer:
    return next(n for n in cluster.nodes if n.port == port)


def _master_of(cluster: RedisClusterServers, client: redis.Redis, key: str) -> RedisServer:
    return _node(cluster, int(client.get_node_from_key(key).port))  # type: ignore[attr-defined]


def _replica_of(cluster: RedisClusterServers, master: RedisServer) -> RedisServer:
    for node in cluster.nodes:
        client = redis.Redis.from_url(node.url, socket_timeout=1.0)
        try:
            info = client.info("replication")
        finally:
            client.close()
        if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
            return node
    raise AssertionError(f"no replica of the master on port {master.port}")


def _probe(settings, client: redis.Redis, avoid: RedisServer, cluster: RedisClusterServers) -> tuple[str, int]:
    """A session (not one of the load's) whose stream lives on a master other than ``avoid``."""
    keys = Keys(settings.key_prefix)
    for n in itertools.count():
        session = f"probe{n}"
        shard = shard_of(session, SHARDS)
        if _master_of(cluster, client, keys.stream(shard)).port != avoid.port:
            return session, shard
    raise AssertionError("unreachable")


def _story(session: str, workdir: Path, ledger: Ledger) -> str:
    """What a session's turns went through, for a failure that finds OV holding other than
    what was acknowledged: its commits, and every log line of the deployment that names it
    (the fake OV logs each write: ``--log-writes``)."""
    lines = [f"session {session}; its commits: {ledger.commits(session)}"]
    for log in sorted(workdir.glob("*.log")):
        said = [line for line in log.read_text(errors="replace").splitlines() if f" {session}" in line]
        lines += [f"{log.name}: {line}" for line in said if "rq.worker" not in line]
    return "\n".join(lines)


def _checks_story(queue: Any, checks: list[str], workdir: Path) -> str:
    """Each extraction check not finished: its job's status, origin, line and the registries
    holding it, with what the worker logged of its commit."""
    lines = []
    for check in checks:
        job = Job.fetch(check, connection=queue.connection)
        if job.get_status() == JobStatus.FINISHED:
            continue
        held = [r.name for r in (queue.scheduled_job_registry, queue.started_job_registry) if check in r]
        lines.append(f"{check}: {job.get_status()} origin {job.origin} meta {job.meta} registries {held}")
        commit = check.removesuffix("_extraction")
        log = (workdir / "worker.log").read_text(errors="replace").splitlines()
        lines += [f"  worker.log: {line}" for line in log if commit in line]
    return "\n".join(lines)


@pytest.mark.parametrize("publish_replicas", [1, 0])
def test_a_failover_stalls_only_its_shards_and_leaves_no_false_lag_or_traceback(
    replicated_cluster: RedisClusterServers, redis_url: str, fake_ov_url: str, tmp_path: Path, publish_replicas: int
) -> None:
    cluster = replicated_cluster
    rpc_port = free_port()
    values = _deployment(
        cluster,
        redis_url,
        fake_ov_url,
        shards=SHARDS,
        capture_lease_ms=LEASE_MS,
        commit_token_threshold=3000,
        commit_keep_recent_count=4,
        phase2_poll_interval_s=1.0,  # a commit stays in flight a while: the kill finds some mid-way
        publish_replicas=publish_replicas,
        rpc_port=rpc_port,
    )
    deploy = Deployment(values, tmp_path)
    settings = deploy.settings
    ledger = Ledger(settings, fake_ov_url, SESSIONS)
    ledger.redis.ping()  # the cluster clients learn every node now, not from a seed that may die
    client = connect(settings)
    client.ping()
    keys = Keys(settings.key_prefix)
    try:
        deploy.start("capture-a")
        deploy.start("capture-b")
        deploy.start("worker")
        deploy.start("rpc")
        rpc_url = f"http://127.0.0.1:{rpc_port}"
        wait_until(lambda: answers(f"{rpc_url}/healthz"), "the RPC answering", timeout_s=60)
        load = Load(settings, SESSIONS, RATE).start()
        assembles = Assembles(rpc_url, load, SESSIONS).start()
        time.sleep(3.0)

        # the victim: the master of the load's first session, not the one of the deployment hash
        # (which every publish reads), so that other shards can still be published to
        victim = next(
            _master_of(cluster, client, keys.stream(shard_of(s, SHARDS)))
            for s in SESSIONS
            if _master_of(cluster, client, keys.stream(shard_of(s, SHARDS))).port
            != _master_of(cluster, client, keys.deployment()).port
        )
        replica = _replica_of(cluster, victim)
        probe, probe_shard = _probe(settings, client, victim, cluster)
        for session in SESSIONS:  # a commit of every session in flight at the kill
            request_commit(
                client, settings, SessionAddress(session, "main", None), reason="manual", keep_recent_count=0
            )
        asked_before = {o.commit_id: o for s in SESSIONS for o in ledger.commits(s)}
        time.sleep(0.1)  # replicated by then (what a replica never got is issue 30's), and mid-way
        victim.kill()
        time.sleep(LEASE_MS / 1000 + 1.0)  # past every lease the dead master could have held up
        probe_id = publish_turn(client, settings, chaos_turn(probe, 0))
        measure(
            lambda: ledger.caught_up({probe_shard: probe_id}),
            timeout_s=NODE_TIMEOUT_MS / 1000,
            what="a turn on a live master's shard applied while the dead master's replica waits",
        )
        assert cluster.role(replica) == "slave", "the replica was promoted first: the test proved nothing"
        wait_until(lambda: cluster.role(replica) == "master", "the replica promoted", timeout_s=DEADLINE_S)
        promoted = time.monotonic()

        def asked_before_final() -> bool:
            try:
                now = {o.commit_id: o for s in SESSIONS for o in ledger.commits(s)}
            except REDIS_ERRORS:  # the cluster settling after the promotion: not yet
                return False
            waiting = [now.get(c, o) for c, o in asked_before.items() if now.get(c, o).status not in FINAL_STATUSES]
            if any(time.time() - o.requested_at > COMMIT_STALL_S for o in waiting):
                said = read_status(client, settings)  # a commit waiting that long is shown
                assert said.oldest_commit_s > COMMIT_STALL_S and said.oldest_commit, said.as_json()
            return not waiting

        wait_until(asked_before_final, "every commit asked for before the kill final", timeout_s=DEADLINE_S)
        commits_final_s = time.monotonic() - promoted
        assert commits_final_s <= COMMITS_AFTER_PROMOTION_S, commits_final_s
        # each of those that completed with no memory had its extraction looked at through the
        # failover (a verdict for every check asked for), and no job of their chains failed
        finals = [o for s in SESSIONS for o in ledger.commits(s) if o.commit_id in asked_before]
        checks = [
            f"{o.commit_id}_extraction"
            for o in finals
            if o.status == "completed" and o.archive_uri and o.memories_extracted == 0  # as the poller asks
        ]
        queue = commit_queue(client, settings)

        def checked() -> bool:
            return all(Job.fetch(c, connection=queue.connection).get_status() == JobStatus.FINISHED for c in checks)

        try:
            wait_until(checked, f"a verdict for each of the {len(checks)} extraction checks", timeout_s=DEADLINE_S)
        except AssertionError as exc:  # which check waits, and where its job is
            raise AssertionError(f"{exc}\n{_checks_story(queue, checks, tmp_path)}") from None
        assert job_counts(client, settings)["failed"] == 0, job_counts(client, settings)

        victim.restart()  # rejoins as a replica of the promoted one
        cluster.wait_ok(DEADLINE_S)
        time.sleep(2.0)
        taken_back = redis.Redis.from_url(victim.url)
        try:
            taken_back.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        finally:
            taken_back.close()
        wait_until(lambda: cluster.role(victim) == "master", "the old master back by TAKEOVER", timeout_s=DEADLINE_S)
        cluster.wait_ok(DEADLINE_S)
        time.sleep(2.0)

        turns = load.finish(timeout_s=DEADLINE_S)
        assembles.stop()
        marks = load.marks()
        # without publishReplicas the takeover may lose the newest turns (counted below)
        caught_up = functools.partial(ledger.caught_up, marks, some_lost=not publish_replicas)
        measure(caught_up, timeout_s=DEADLINE_S, what="the last turns applied")
        assert not deploy.exited(), {n: deploy.log(n) for n in deploy.exited()}

        def nothing_unread() -> bool:
            backlog = read_backlog(client, settings)
            return all(s.unread == 0 and s.pending == 0 for s in backlog)

        wait_until(nothing_unread, "status showing nothing unread once drained", timeout_s=30)
        lost = twice = 0
        doubled: set[str] = set()  # sessions OV holds a turn of twice (publish_replicas 0 only)
        for session in SESSIONS:
            in_ov, acknowledged = ledger.ov_ids(session), expected_ids(session, turns)
            if publish_replicas:
                assert in_ov == acknowledged, _story(session, tmp_path, ledger)
            else:
                # What the README promises without publishReplicas: a takeover may lose the
                # newest turns, and capture's newest records with them, whose turns it then writes
                # to OV again (loaded run 31: fo6's q39). Both are counted; what is kept stays in
                # order, each turn first where it belongs.
                firsts = list(dict.fromkeys(in_ov))
                assert firsts == [i for i in acknowledged if i in set(in_ov)], _story(session, tmp_path, ledger)
                lost += len(acknowledged) - len(firsts)
                twice += len(in_ov) - len(firsts)
                doubled |= {session} if len(in_ov) > len(firsts) else set()
        assert set(assembles.statuses) == {200}, assembles.statuses
        # a turn OV holds twice is assembled twice; no other turn ever is
        assert [t for t in assembles.twice if t.split(":")[0] not in doubled] == [], assembles.twice[:3]
        assert ledger.ov_ids(probe)[:2] == [f"{probe}:q0", f"{probe}:a0"]
        assert list_dead_letters(ledger.redis, settings) == []
        assert job_counts(client, settings)["failed"] == 0, job_counts(client, settings)
        for name in ("capture-a", "capture-b", "worker", "rpc"):
            log = deploy.log(name, lines=100_000)
            assert "Traceback" not in log and "crashed" not in log and "quitting" not in log, (name, log[-5000:])
        print(
            f"\nfailover, publish_replicas={publish_replicas}: {len(SESSIONS)} sessions x {turns} turns, "
            f"{load.resends} publishes resent, {lost} acknowledged messages lost, {twice} written twice; "
            f"longest publish "
            f"{load.longest_publish_s:.1f} s, longest assemble {assembles.longest_s:.2f} s "
            f"({sum(assembles.statuses.values())} answered); the {len(asked_before)} commits asked for before "
            f"the kill final {commits_final_s:.1f} s after the promotion"
        )
    finally:
        client.close()
        ledger.close()
        deploy.stop()
