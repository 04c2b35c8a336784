"""An OV that refuses ovstream's API key is a deployment fault, as OV being away is: capture
dead-letters nothing, waits, and says why (its log, ``ovstream health``, ``ovstream status``);
once the key is mended every turn is applied, once.

Real processes (``ovstream capture``, ``ovstream worker``), a real redis-server, the FakeOV
over HTTP in API-key mode.
"""

from __future__ import annotations

import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import redis

from tests.helpers.chaos import Deployment, Load
from tests.helpers.e2e import ovstream_command, unique
from tests.helpers.fake_ov_process import fake_ov_process
from tests.helpers.waiting import wait_until
from workers.dev.local_redis import start_redis_server
from workers.status import read_backlog
from workers.store.dead_letters import list_dead_letters

GOOD_KEY = "the-right-user-key-0123"
REFUSED_S = 60.0
"""The issue's bound: a capture with a wrong key dead-letters nothing for this long under load."""
SESSIONS = [f"keyed-{i}" for i in range(6)]


def test_a_wrong_ov_key_dead_letters_nothing_says_why_and_every_turn_lands_once_mended(tmp_path: Path) -> None:
    server = start_redis_server()
    stack = ExitStack()
    ov_url = stack.enter_context(fake_ov_process(tmp_path, "--api-key", f"{GOOD_KEY}=acme:alice"))
    values = {
        "base_url": ov_url,
        "redis_url": server.url,
        "key_prefix": unique("keyed"),
        "shards": 4,
        "api_key": "not-a-key-of-this-ov",
        "max_deliveries": 2,  # were a refusal a turn's failure, it would be dead-lettered at once
    }
    deploy = Deployment(values, tmp_path)
    client = redis.Redis.from_url(server.url)
    load = None
    try:
        deploy.start("capture")
        load = Load(deploy.settings, SESSIONS, rate=6).start()
        started = time.monotonic()
        wait_until(lambda: "refuses ovstream's API key" in deploy.log("capture", 1000), "capture saying why")
        wait_until(
            lambda: "refuses key" in _health(deploy)[1], "health saying OV refuses the key", timeout_s=30, interval_s=1
        )
        time.sleep(max(0.0, REFUSED_S - (time.monotonic() - started)))
        turns = load.finish(timeout_s=30)
        load = None
        assert list_dead_letters(client, deploy.settings) == []  # 60 s under load: nothing given up
        assert deploy.exited() == {}
        log = deploy.log("capture", lines=100_000)
        assert "Traceback" not in log and "set apiKey" in log, log
        code, said = _health(deploy)
        assert said.startswith("degraded:") and "refuses key" in said, said
        assert code == 0  # a restart would not mend a key: no liveness probe fails for it

        # the operator mends the key; every turn lands, once and in order
        deploy.terminate("capture")
        deploy = Deployment({**values, "api_key": GOOD_KEY}, tmp_path)
        deploy.start("capture")
        caught_up = lambda: all(s.oldest_unapplied is None for s in read_backlog(client, deploy.settings))  # noqa: E731
        wait_until(caught_up, "every turn applied once the key is mended", timeout_s=60)
        with httpx.Client(base_url=ov_url, headers={"X-API-Key": GOOD_KEY}, timeout=10) as ov_http:
            for session in SESSIONS:
                context = ov_http.get(f"/api/v1/sessions/{session}/context", params={"token_budget": 10**6})
                texts = [m["parts"][0]["text"].split(" ", 1)[0] for m in context.json()["result"]["messages"]]
                assert texts == [f"{session}:{k}{i}" for i in range(turns) for k in ("q", "a")], (session, texts)
        assert list_dead_letters(client, deploy.settings) == []
    finally:
        if load is not None:
            load.finishing.set()
        client.close()
        deploy.stop()
        stack.close()
        server.stop()


def _health(deploy: Deployment) -> tuple[int, str]:
    """``ovstream health --role capture`` as a probe runs it: its exit code and its line."""
    done = subprocess.run(
        [*ovstream_command(), "health", "--role", "capture"], env=deploy.env, capture_output=True, text=True
    )
    return done.returncode, done.stdout.strip()
