"""A deployment whose commit queue is spread over two queue Redis (``queueRedisUrls``), with
real processes: a store redis-server, two queue redis-servers, the FakeOV over HTTP,
``ovstream capture`` and ``ovstream worker``.

Under a steady load the sessions' commits go to both queues (each session's always to its
own: core.queue_routing); one worker serving both stops within 10 s of SIGTERM; then one
worker per queue (``--queue``), one of them SIGKILLed mid-way and started again, and one
queue Redis SIGKILLed and started again (durable) under the load; and an idle worker of two
queues ends both of its RQ workers on SIGTERM. Afterwards
every session holds every turn once, in order, every commit is final and completed, each
queue Redis ran commits of its own sessions only, and ``ovstream status`` sees both.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis
from rq import Queue, Worker

from core.session import SessionAddress
from tests.helpers.chaos import Deployment, Ledger, Load, expected_ids, measure
from tests.helpers.e2e import ovstream_command, unique
from workers.commits.queue import job_counts, queue_of
from workers.dev.local_redis import start_redis_server
from workers.store.dead_letters import list_dead_letters

SESSIONS = [f"qs{i}" for i in range(8)]
RATE = 16.0
DEADLINE_S = 90.0


def test_commits_over_two_queue_redis_lose_nothing_and_each_queue_keeps_its_sessions(
    redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    queues = [start_redis_server(durable=True), start_redis_server(durable=True)]
    values = {
        "base_url": fake_ov_url,
        "redis_url": redis_url,
        "queue_redis_urls": [q.url for q in queues],
        "key_prefix": unique("qs"),
        "shards": 4,
        "capture_block_ms": 100,
        "phase2_poll_interval_s": 0.05,
        "commit_token_threshold": 500,
        "commit_keep_recent_count": 2,
    }
    deploy = Deployment(values, tmp_path)
    settings = deploy.settings
    of_queue = {s: queue_of(settings, SessionAddress(s, "main", None)) for s in SESSIONS}
    assert set(of_queue.values()) == {0, 1}, of_queue  # the sessions cover both queues
    ledger = Ledger(settings, fake_ov_url, SESSIONS)
    load = None
    try:
        deploy.start("capture")
        deploy.start("worker")  # serves every queue Redis of the deployment
        load = Load(settings, SESSIONS, RATE).start()

        def completed_on(queue: int) -> bool:
            done = [o for s in SESSIONS if of_queue[s] == queue for o in ledger.commits(s)]
            return any(o.status == "completed" for o in done)

        measure(lambda: completed_on(0) and completed_on(1), timeout_s=DEADLINE_S, what="a commit on each queue")
        said = deploy.log("worker", lines=1000)
        assert "of queue Redis 0 (" in said and ", 1 (" in said, said
        stopping = time.monotonic()
        assert deploy.terminate("worker", timeout_s=10) == 0  # both of its RQ workers within 10 s
        print(f"\nthe worker of two queues stopped {time.monotonic() - stopping:.1f} s after SIGTERM")
        for server in queues:  # each of its RQ workers ended as RQ ends one (none left registered)
            client = redis.Redis.from_url(server.url)
            try:
                assert Worker.all(connection=client) == [], server.url
            finally:
                client.close()

        deploy.start("worker-a", args=("--queue", "0"))
        deploy.start("worker-b", args=("--queue", "1"))
        time.sleep(2.0)
        deploy.kill("worker-b")  # whatever step its commits were at
        deploy.start("worker-b", args=("--queue", "1"))
        time.sleep(1.0)
        queues[1].kill()  # one queue Redis away (its append-only file kept): its sessions' commits wait
        time.sleep(3.0)
        queues[1].restart()
        turns = load.finish(timeout_s=DEADLINE_S)
        marks, load = load.marks(), None
        measure(lambda: ledger.caught_up(marks), timeout_s=DEADLINE_S, what="the turns applied")
        measure(lambda: not ledger.unsettled(), timeout_s=DEADLINE_S, what="every commit final")

        for session in SESSIONS:  # 0 lost, 0 twice, in order, across commits
            assert ledger.ov_ids(session) == expected_ids(session, turns), session
        commits = {s: ledger.commits(s) for s in SESSIONS}
        unfinished = [(o.commit_id, o.status, o.error) for c in commits.values() for o in c if o.status != "completed"]
        assert unfinished == [], deploy.log("worker-b", lines=300)
        assert list_dead_letters(ledger.redis, settings) == []
        # each queue Redis ran the commit jobs of its own sessions, and only those
        for index, server in enumerate(queues):
            client = redis.Redis.from_url(server.url)
            try:
                ran = set(Queue(settings.commit_queue_name, connection=client).finished_job_registry.get_job_ids())
            finally:
                client.close()
            mine = {o.commit_id for s, c in commits.items() if of_queue[s] == index for o in c}
            theirs = {o.commit_id for s, c in commits.items() if of_queue[s] != index for o in c}
            assert ran & mine and not ran & theirs, (index, sorted(ran)[:5])
        # what the SIGKILL left (a job it held, enqueued again by the sweep) is taken and ends
        measure(lambda: job_counts(ledger.redis, settings)["queued"] == 0, timeout_s=DEADLINE_S, what="no job queued")
        status = subprocess.run(
            [*ovstream_command(), "status"], env=deploy.env, capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0, status.stderr
        assert all(str(q.port) in status.stdout for q in queues), status.stdout
        for name in ("capture", "worker", "worker-a", "worker-b"):
            assert "Traceback" not in deploy.log(name, lines=100_000), deploy.log(name)
        assert deploy.exited() == {"worker": 0}, deploy.exited()  # the others waited the queue Redis out
    finally:
        if load is not None:
            load.finishing.set()
        ledger.close()
        deploy.stop()
        for server in queues:
            server.stop()


def test_an_idle_worker_of_two_queue_redis_ends_each_of_its_rq_workers_on_sigterm(
    redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    """The RQ worker of the second queue blocks in its dequeue in a thread of its own: SIGTERM
    ends it as RQ ends one (registered no more), not with the process (it stayed in RQ's
    registry, and the stop waited for it)."""
    queues = [start_redis_server(), start_redis_server()]
    values = {
        "base_url": fake_ov_url,
        "redis_url": redis_url,
        "queue_redis_urls": [q.url for q in queues],
        "key_prefix": unique("qi"),
    }
    deploy = Deployment(values, tmp_path)
    clients = [redis.Redis.from_url(q.url) for q in queues]
    try:
        deploy.start("worker")
        measure(lambda: all(Worker.all(connection=c) for c in clients), timeout_s=60, what="an RQ worker on each")
        time.sleep(1.0)  # both blocked in their dequeue
        assert deploy.terminate("worker", timeout_s=10) == 0
        assert [Worker.all(connection=c) for c in clients] == [[], []]
        assert "Traceback" not in deploy.log("worker", lines=10_000)
    finally:
        for client in clients:
            client.close()
        deploy.stop()
        for server in queues:
            server.stop()
