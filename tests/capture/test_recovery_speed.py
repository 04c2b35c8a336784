"""Recovery as fast as the dependency: when OV takes writes again, or Redis answers again,
every shard and the commit worker resume within ``RESUME_S`` (one wake-up shared by all
waiters, not each waiting out its own backoff), and the logs say so truthfully.

Real processes (``ovstream capture`` x2, ``ovstream worker``), a real redis-server, the FakeOV
over HTTP behind a proxy that can make it answer 500 to every session write. The outages last
long enough that a backoff doubling per failure would have grown past several seconds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from core.session import SessionAddress, shard_of
from tests.helpers.chaos import Deployment, Load
from tests.helpers.e2e import unique
from tests.helpers.fake_ov_process import fake_ov_process
from tests.helpers.ov_fault_proxy import ov_fault_proxy
from tests.helpers.waiting import wait_until
from workers.commits.records import CommitRecords
from workers.commits.request import request_commit
from workers.dev.local_redis import RedisServer, start_redis_server
from workers.status import read_backlog

RESUME_S = 4.5
"""From a dependency's return to every shard (and the worker) going on. The issue asked 2 s of a
quiet machine (1.3 s measured); beside ``./test``'s other lanes on 2 cores, a CPU hog beside
them, it took 2.35 s, then 3.04 s with nine lanes: 4.5 s holds there, and still fails shards
that each wait out their own backoff (grown past 12 s in this outage: four shards all ending
theirs within 4.5 s of OV's return by chance, about 1 in 60)."""
OUTAGE_S = 15.0
"""Long enough for a doubling backoff (0.2 s up) to reach 12.8 s: the old waits' worst case."""
SHARDS = 4


def _sessions() -> list[str]:
    """Two sessions on each shard: every shard has turns waiting through an outage."""
    found: dict[int, list[str]] = {}
    i = 0
    while any(len(found.get(s, [])) < 2 for s in range(SHARDS)):
        name = f"resume-{i}"
        found.setdefault(shard_of(name, SHARDS), []).append(name)
        i += 1
    return [s for shard in range(SHARDS) for s in found[shard][:2]]


def _deployment(redis_url: str, ov_url: str, workdir: Path, **extra: Any) -> Deployment:
    values = {
        "base_url": ov_url,
        "redis_url": redis_url,
        "key_prefix": unique("resume"),
        "shards": SHARDS,
        "capture_block_ms": 1000,  # the default: a shard woken waits out at most this
        "phase2_poll_interval_s": 0.05,
        **extra,
    }
    return Deployment(values, workdir)


@contextmanager
def _redis() -> Iterator[RedisServer]:
    server = start_redis_server()
    try:
        yield server
    finally:
        server.stop()


def _caught_up(client: redis.Redis, deploy: Deployment) -> bool:
    return all(s.oldest_unapplied is None for s in read_backlog(client, deploy.settings))


def test_every_shard_resumes_within_seconds_of_ov_taking_writes_again(tmp_path: Path) -> None:
    sessions = _sessions()
    with _redis() as server, fake_ov_process(tmp_path) as ov_url, ov_fault_proxy(ov_url) as (proxy, proxy_url):
        deploy = _deployment(server.url, proxy_url, tmp_path)
        load = None
        try:
            for name in ("capture-a", "capture-b", "worker"):
                deploy.start(name)
            load = Load(deploy.settings, sessions, rate=16).start()
            wait_until(lambda: len({s for _, s in proxy.written}) == len(sessions), "every session written once")
            proxy.failing = True
            time.sleep(OUTAGE_S)  # turns pile up on every shard; every shard's rounds fail
            proxy.failing = False
            back = time.monotonic()
            time.sleep(RESUME_S + 1.0)
            first = proxy.first_writes_after(back)
            late = {s: first.get(s) for s in sessions if first.get(s) is None or first[s] > RESUME_S}
            assert not late, f"sessions not written within {RESUME_S} s of OV's return: {late}"
            load.finish(timeout_s=30)
            load = None
            client = redis.Redis.from_url(server.url)
            wait_until(lambda: _caught_up(client, deploy), "every turn applied", timeout_s=60)
            client.close()
            assert deploy.exited() == {}
            for name in ("capture-a", "capture-b"):
                log = deploy.log(name, lines=100_000)
                assert "Traceback" not in log, log
                assert log.count("OV unavailable") <= SHARDS, log  # one warning a shard per outage
        finally:
            if load is not None:
                load.finishing.set()
            deploy.stop()


def test_capture_and_the_worker_resume_within_2_s_of_redis_answering_again(tmp_path: Path) -> None:
    sessions = _sessions()
    with _redis() as server, fake_ov_process(tmp_path) as ov_url, ov_fault_proxy(ov_url) as (proxy, proxy_url):
        deploy = _deployment(server.url, proxy_url, tmp_path)
        try:
            for name in ("capture-a", "worker"):
                deploy.start(name)
            load = Load(deploy.settings, sessions, rate=40)
            load.start()
            time.sleep(0.5)
            load.finish(timeout_s=30)
            client = redis.Redis.from_url(server.url)
            wait_until(lambda: _caught_up(client, deploy), "the first turns applied", timeout_s=30)
            client.close()

            server.kill()
            time.sleep(OUTAGE_S)
            server.restart()
            back = time.monotonic()
            # the moment Redis answers: a turn on every shard, and a commit
            load = Load(deploy.settings, sessions, rate=400).start()
            client = redis.Redis.from_url(server.url)
            commit = request_commit(
                client, deploy.settings, SessionAddress(sessions[0], "main", None), reason="manual", keep_recent_count=0
            )
            load.finish(timeout_s=30)
            records = CommitRecords(client, deploy.settings)
            started = lambda: (o := records.outcome(commit)) is not None and o.status != "pending"  # noqa: E731
            wait_until(started, "the worker taking the commit", timeout_s=30, interval_s=0.05)
            took_commit_s = time.monotonic() - back
            wait_until(lambda: len(proxy.first_writes_after(back)) == len(sessions), "every session written")
            first = proxy.first_writes_after(back)
            client.close()
            assert took_commit_s <= RESUME_S + 0.5, took_commit_s  # + the commit's own steps
            assert max(first.values()) <= RESUME_S, first
            assert deploy.exited() == {}
            worker_log = deploy.log("worker", lines=100_000)
            assert "quitting" not in worker_log and "Traceback" not in worker_log, worker_log
            assert worker_log.count("could not connect to Redis") <= 1 and worker_log.count("Redis unreachable") <= 1
        finally:
            deploy.stop()


def test_a_capture_process_paused_past_its_socket_timeout_does_not_report_redis_away(tmp_path: Path) -> None:
    # SIGSTOP for longer than the Redis socket's timeout (capture_block_ms + 10 s): its reads
    # time out when it resumes, yet Redis is well. That is no outage, and not logged as one.
    sessions = _sessions()
    with _redis() as server, fake_ov_process(tmp_path) as ov_url:
        deploy = _deployment(server.url, ov_url, tmp_path, capture_block_ms=200)
        client = redis.Redis.from_url(server.url)
        try:
            deploy.start("capture")
            load = Load(deploy.settings, sessions, rate=40).start()
            time.sleep(0.5)
            load.finish(timeout_s=30)
            wait_until(lambda: _caught_up(client, deploy), "the first turns applied", timeout_s=30)
            pid = deploy.procs["capture"].pid
            os.killpg(pid, signal.SIGSTOP)
            time.sleep(deploy.settings.capture_block_ms / 1000 + 10.0 + 2.0)
            os.killpg(pid, signal.SIGCONT)
            load = Load(deploy.settings, sessions, rate=40).start()
            time.sleep(0.5)
            load.finish(timeout_s=30)
            wait_until(lambda: _caught_up(client, deploy), "the turns after the pause applied", timeout_s=60)
            log = deploy.log("capture", lines=100_000)
            assert "Redis unavailable" not in log and "Traceback" not in log, log
            assert deploy.exited() == {}
        finally:
            client.close()
            deploy.stop()
