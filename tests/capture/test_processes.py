"""``ovstream capture`` and ``ovstream worker`` as an operator runs them: started before
Redis, they wait and become ready without a restart; stopped with SIGTERM under load, a
capture process hands its shards over (released, not left to expire) and nothing is lost.

Real processes, a real redis-server, and the FakeOV served over HTTP (``ovstream fake-ov``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from core.session import SessionAddress, shard_of
from tests.helpers.chaos import Deployment, Ledger, Load, expected_ids, measure
from tests.helpers.e2e import ovstream_command, settings_env, unique
from tests.helpers.fake_ov_process import answers, ov_answers, spawn_fake_ov
from tests.helpers.waiting import wait_until
from workers.commits.records import CommitRecords
from workers.commits.request import request_commit
from workers.dev.local_redis import free_port, start_redis_server
from workers.status import read_backlog, read_status
from workers.store.health import read_health, record_health


def _values(redis_url: str, ov_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "base_url": ov_url,
        "redis_url": redis_url,
        "key_prefix": unique("ops"),
        "shards": 4,
        "capture_block_ms": 100,
        "phase2_poll_interval_s": 0.05,
        **extra,
    }


def _consumer_name(deploy: Deployment, name: str) -> str:
    match = re.search(r"capture worker (\S+) on shards", deploy.log(name, lines=100_000))
    assert match is not None, deploy.log(name)
    return match.group(1)


def _logged(deploy: Deployment, name: str, text: str) -> bool:
    return text in deploy.log(name, lines=100_000)


def test_workers_started_before_redis_and_ov_become_ready_without_a_restart(tmp_path: Path) -> None:
    server = start_redis_server()
    server.kill()  # Redis is down when the workers start, and OV is not there yet
    ov_port = free_port()
    ov_url = f"http://127.0.0.1:{ov_port}"
    deploy = Deployment(_values(server.url, ov_url, log_format="json"), tmp_path)
    ov = None
    try:
        deploy.start("capture")
        deploy.start("worker")
        for name in ("capture", "worker"):
            wait_until(lambda n=name: _logged(deploy, n, "waiting for Redis at"), f"{name} waiting for Redis")
        server.restart()
        for name in ("capture", "worker"):
            wait_until(lambda n=name: _logged(deploy, n, "Redis reachable at"), f"{name} finding Redis")
        client = redis.Redis.from_url(server.url)
        load = Load(deploy.settings, ["late"], rate=50).start()
        time.sleep(0.2)
        load.finish(timeout_s=30)
        wait_until(lambda: _logged(deploy, "capture", "OV unavailable"), "capture finding OV away")
        ov = spawn_fake_ov(ov_port, tmp_path)  # OV comes last
        wait_until(lambda: ov_answers(ov_url), "the fake OV answering")
        caught_up = lambda: all(s.oldest_unapplied is None for s in read_backlog(client, deploy.settings))  # noqa: E731
        wait_until(caught_up, "capture applying every turn once OV is there", timeout_s=60)
        address = SessionAddress("late", "main", None)
        commit = request_commit(client, deploy.settings, address, reason="manual", keep_recent_count=0)
        records = CommitRecords(client, deploy.settings)
        done = lambda: (o := records.outcome(commit)) is not None and o.status == "completed"  # noqa: E731
        wait_until(done, "the worker running the commit")
        client.close()
        assert deploy.exited() == {}
        for name in ("capture", "worker"):
            log = deploy.log(name, lines=100_000)
            assert log.count("waiting for Redis at") == 1 and "Traceback" not in log, log
            lines = [json.loads(line) for line in log.splitlines()]  # logFormat json: every line
            assert {line["process"] for line in lines} == {name}
        capture_lines = [json.loads(line) for line in deploy.log("capture", lines=100_000).splitlines()]
        assert sum("OV unavailable" in line["msg"] and line["level"] == "WARNING" for line in capture_lines) == 1
        assert shard_of("late", deploy.settings.shards) in {line.get("shard") for line in capture_lines}
    finally:
        deploy.stop()
        if ov is not None:
            ov.terminate()
            ov.wait(timeout=10)
        server.stop()


def test_sigterm_under_load_hands_the_shards_over_and_loses_nothing(
    redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    # A lease far longer than the handover: shards that move before it could expire were released.
    deploy = Deployment(_values(redis_url, fake_ov_url, capture_lease_ms=30_000), tmp_path)
    sessions = [f"ops{i}" for i in range(8)]
    client = redis.Redis.from_url(redis_url)
    ledger = Ledger(deploy.settings, fake_ov_url, sessions)
    try:
        deploy.start("capture-a")
        wait_until(lambda: {s.owner for s in read_backlog(client, deploy.settings)} - {None}, "capture-a owning shards")
        deploy.start("capture-b")
        owners = lambda: {s.owner for s in read_backlog(client, deploy.settings)}  # noqa: E731
        wait_until(lambda: len(owners() - {None}) == 2, "the shards split between the two")
        load = Load(deploy.settings, sessions, rate=40).start()
        time.sleep(1.0)
        leaving = _consumer_name(deploy, "capture-a")
        assert leaving in owners()
        assert deploy.terminate("capture-a") == 0
        handover = measure(lambda: leaving not in owners() and None not in owners(), timeout_s=25, what="the handover")
        print(f"\nshards of the SIGTERMed capture process owned by the other {handover:.2f}s after it exited")
        turns = load.finish(timeout_s=30)
        wait_until(lambda: ledger.caught_up(load.marks()), "every turn applied", timeout_s=60)
        for session in sessions:
            assert ledger.ov_ids(session) == expected_ids(session, turns), session
        log = deploy.log("capture-a", lines=100_000)
        assert "released by" in log and "Traceback" not in log, log
        assert deploy.exited() == {"capture-a": 0}
    finally:
        ledger.close()
        client.close()
        deploy.stop()


def test_a_stuck_process_shows_as_unhealthy(redis_url: str, fake_ov_url: str, tmp_path: Path, capsys: Any) -> None:
    deploy = Deployment(_values(redis_url, fake_ov_url), tmp_path)
    client = redis.Redis.from_url(redis_url)
    states = lambda: {p.role: p.state for p in read_health(client, deploy.settings)}  # noqa: E731
    try:
        deploy.start("capture")
        deploy.start("worker")
        wait_until(lambda: states() == {"capture": "ok", "worker": "ok"}, "both processes healthy")
        frozen = deploy.procs["capture"].pid
        os.kill(frozen, signal.SIGSTOP)  # alive but stuck
        try:
            wait_until(
                lambda: states().get("capture") == "stale", "the frozen capture worker shown stale", timeout_s=30
            )
            assert states()["worker"] == "ok"
            status = read_status(client, deploy.settings).as_json()
            assert {(p["role"], p["state"]) for p in status["processes"]} == {("capture", "stale"), ("worker", "ok")}
        finally:
            os.kill(frozen, signal.SIGCONT)
        wait_until(lambda: states().get("capture") == "ok", "the capture worker healthy again")
        assert deploy.terminate("capture") == 0
        wait_until(lambda: "capture" not in states(), "a clean stop removing its record")
    finally:
        client.close()
        deploy.stop()


def test_a_process_that_cannot_reach_ov_is_degraded(redis_client: redis.Redis, settings: Any) -> None:
    with redis_client.pipeline() as pipe:
        record_health(pipe, settings, "capture", "c1", shards="0,1", ov="unreachable")
        record_health(pipe, settings, "capture", "c2", shards="2,3", ov="ok")
        pipe.execute()
    assert {p.name: p.state for p in read_health(redis_client, settings)} == {"c1": "degraded", "c2": "ok"}


def test_capture_with_ov_away_and_no_turns_says_so_in_its_log_status_and_health(redis_url: str, tmp_path: Path) -> None:
    """No turn has to fail first: the worker's own probe of OV's /health finds it away."""
    deploy = Deployment(_values(redis_url, f"http://127.0.0.1:{free_port()}"), tmp_path)  # nothing listens
    client = redis.Redis.from_url(redis_url)
    try:
        deploy.start("capture")
        wait_until(
            lambda: [p.state for p in read_health(client, deploy.settings)] == ["degraded"],
            "the capture worker shown degraded",
            timeout_s=60,
        )
        assert _logged(deploy, "capture", "OV unreachable"), deploy.log("capture")

        def run(*argv: str) -> subprocess.CompletedProcess[str]:
            command = [*ovstream_command(), *argv]
            return subprocess.run(command, env=deploy.env, cwd=tmp_path, capture_output=True, text=True, timeout=60)

        health = run("health", "--role", "capture")
        assert health.returncode == 0, health  # a liveness probe: restarting capture would not bring OV back
        assert health.stdout.startswith("degraded: capture") and "(ov unreachable" in health.stdout, health.stdout
        status = run("status")
        assert status.returncode == 0 and "degraded" in status.stdout and "ov=unreachable" in status.stdout, status
        assert deploy.terminate("capture") == 0
        assert "Traceback" not in deploy.log("capture", lines=100_000)
    finally:
        client.close()
        deploy.stop()


def test_the_rpc_serves_from_several_processes_and_stops_cleanly(
    redis_url: str, fake_ov_url: str, tmp_path: Path
) -> None:
    port = free_port()
    deploy = Deployment(_values(redis_url, fake_ov_url, rpc_port=port, rpc_workers=2), tmp_path)
    deploy.start("rpc")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers(f"{url}/healthz"), "the RPC answering", timeout_s=60)
        for _ in range(8):  # whichever process takes it, the same answer
            r = httpx.post(f"{url}/v1/assemble", json={"sessionId": "s", "messages": []}, timeout=10)
            assert r.status_code == 200 and r.json()["messages"] == []
        assert deploy.terminate("rpc") == 0
        log = deploy.log("rpc", lines=100_000)
        assert log.count("Application startup complete") == 2 and "Traceback" not in log, log
    finally:
        deploy.stop()


def test_up_with_its_port_taken_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            proc = subprocess.run(
                [*ovstream_command(), "up", "--fake-ov", "--port", str(port)],
                env=settings_env({"redis_url": "fakeredis://", "key_prefix": f"busy-{unique('p')}"}),
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired as exc:  # what it said before it hung
            raise AssertionError(f"ovstream up hung:\n{exc.stderr!s}"[-3000:]) from None
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"the RPC could not listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr and "SystemExit" not in proc.stderr


def test_up_started_before_redis_waits_without_a_traceback(tmp_path: Path) -> None:
    log_path = tmp_path / "up.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [*ovstream_command(), "up", "--fake-ov", "--port", "0"],
            env=settings_env({"redis_url": f"redis://127.0.0.1:{free_port()}/0"}),
            cwd=tmp_path,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: "embedded RQ worker: Redis unavailable" in log_path.read_text(), "up waiting for Redis")
        wait_until(lambda: "waiting for Redis at" in log_path.read_text(), "capture waiting for Redis")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    said = log_path.read_text()
    assert "Traceback" not in said and "Exception in thread" not in said, said[-3000:]
    assert said.count("embedded RQ worker: Redis unavailable") == 1  # once per outage
    assert proc.returncode == 0, said[-3000:]
