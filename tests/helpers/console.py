"""A deployment with something to show, for the console's tests: a session assembled with
recall, committed (memories extracted), a forked subagent of it, a dead letter, lag samples.
Seeded over the served RPC's HTTP (as the plugin would) and straight into the FakeOV and Redis
(as capture would)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from core.config import Settings
from core.events import encode
from tests.helpers.capture import publish, turn
from tests.helpers.e2e import wait_for
from tests.helpers.rpc import Rpc, running_worker
from tests.rpc.test_assemble import oc_turns, ov_turns
from workers.dev.fake_ov.app import FakeOV
from workers.status import LAG_SAMPLE_INTERVAL_S, sample_lag
from workers.store.applied import CAPTURED_THROUGH, LAST_ID
from workers.store.dead_letters import dead_letter_fields
from workers.store.keys import Keys, scope_of, shard_of

SESSION = "33333333-3333-4333-8333-333333333333"
KEY = "agent:main:console-demo"
CHILD = "44444444-4444-4444-8444-444444444444"
CHILD_KEY = "agent:main:subagent:console-helper"
OPS_TOKEN = "ops-token-0123456789abcdef"
VIEWER_TOKEN = "viewer-token-0123456789abcdef"
TENANT_TOKEN = "acme-token-0123456789abcdef"
TENANT_OV_KEY = "acme-ov-key-0123"
OTHER_AGENT_SESSION = "55555555-5555-4555-8555-555555555555"
OTHER_AGENT_KEY = "agent:demo:console-other"
TENANT_SESSION = "66666666-6666-4666-8666-666666666666"
TENANT_KEY = "agent:main:acme-chat"
ARTIFACTS = Path(os.environ.get("OVSTREAM_ARTIFACTS", Path(__file__).resolve().parents[2] / ".artifacts")) / "console"
DOC_SHOTS = os.environ.get("OVSTREAM_DOC_SCREENSHOTS")
"""Where scripts/screenshots has the browser test put the docs' pictures (docs/img), as
``console-<name>.png``: they show the console as it is, made by the test that checks it."""

CREDENTIALS: dict[str, Any] = {
    "ops": {"token": OPS_TOKEN},  # acts as the service: may replay dead letters
    "viewer": {"token": VIEWER_TOKEN, "serviceKey": False},  # sees every tenant, may only look
    "acme": {"token": TENANT_TOKEN, "ovKeys": [TENANT_OV_KEY]},  # sees tenant acme's sessions only
}
USER_API_KEYS = {"acme": TENANT_OV_KEY}


def browser_or_skip() -> tuple[str, str]:
    """Debian's Chromium and its driver; a skip when absent, unless ./test requires them."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    if os.environ.get("OVSTREAM_REQUIRE_BROWSER") == "1":
        pytest.fail("chromium and chromedriver are required (scripts/bootstrap.sh browser installs them)")
    pytest.skip("chromium / chromedriver not installed (scripts/bootstrap.sh browser)")


@dataclass
class Seeded:
    recall_prompt: str
    dead_letter_id: str
    undecodable_id: str
    tenant_letter_id: str


def _captured(client: redis.Redis, settings: Settings, sid: str, through: int) -> None:
    key = Keys(settings.key_prefix).applied(shard_of(sid, settings.shards), scope_of(None, "main"), sid)
    client.hset(key, mapping={LAST_ID: "1700000000000-0", CAPTURED_THROUGH: through})


def seed(base_url: str, fake: FakeOV, client: redis.Redis, settings: Settings, app: Any) -> Seeded:
    headers = {"authorization": f"Bearer {OPS_TOKEN}"}
    ov = httpx.Client(transport=fake.transport(), base_url="http://ov")
    fake.seed_memory("User prefers green tea in the afternoon.", category="preferences")
    fake.seed_memory("The deploy runbook lives in ops/runbook.md.", peer="main", category="cases")
    said = ("remember that I prefer green tea", "noted: green tea", "where is the deploy runbook?", "ops/runbook.md")
    ov.post(f"/api/v1/sessions/{SESSION}/messages/batch", json={"messages": ov_turns(*said)}).raise_for_status()
    _captured(client, settings, SESSION, 4)
    rpc = httpx.Client(base_url=base_url, headers=headers, timeout=30)
    with running_worker(Rpc(None, fake, client, settings, app)):  # type: ignore[arg-type]
        compacted = rpc.post("/v1/compact", json={"sessionId": SESSION, "sessionKey": KEY})
        assert compacted.status_code == 200, compacted.text
    prompt = "which tea do I prefer, and where is the deploy runbook?"
    more = ("and the staging host?", "staging.internal")
    ov.post(f"/api/v1/sessions/{SESSION}/messages/batch", json={"messages": ov_turns(*more)}).raise_for_status()
    _captured(client, settings, SESSION, 6)
    body = {"sessionId": SESSION, "sessionKey": KEY, "messages": oc_turns(*said, *more), "prompt": prompt}
    assert rpc.post("/v1/assemble", json=body).status_code == 200
    spawn = {
        "parentSessionKey": KEY,
        "childSessionKey": CHILD_KEY,
        "contextMode": "fork",
        "parentSessionId": SESSION,
        "childSessionId": CHILD,
    }
    assert rpc.post("/v1/subagents/prepare", json=spawn).status_code == 200
    child = {"sessionId": CHILD, "sessionKey": CHILD_KEY, "messages": oc_turns("look at the logs"), "prompt": "go"}
    assert rpc.post("/v1/assemble", json={**child, "forked": True}).status_code == 200
    dead = client.xadd(
        Keys(settings.key_prefix).dead_letters(),
        dead_letter_fields(
            stream=Keys(settings.key_prefix).stream(0),
            entry_id="1700000000000-7",
            payload=encode(turn("dead-lettered", 0)),
            reason="failed",
            error="OV answered 500: internal error (3 deliveries)",
            deliveries=3,
            consumer="capture-1",
        ),
    )
    other = {"sessionId": OTHER_AGENT_SESSION, "sessionKey": OTHER_AGENT_KEY, "messages": oc_turns("hi"), "prompt": "x"}
    assert rpc.post("/v1/assemble", json=other).status_code == 200  # agent demo's: found by id alone
    acme = {"sessionId": TENANT_SESSION, "sessionKey": TENANT_KEY, "messages": oc_turns("acme's"), "prompt": "y"}
    assert rpc.post("/v1/assemble", json=acme, headers={"x-openviking-api-key": TENANT_OV_KEY}).status_code == 200
    undecodable = _dead_letter(client, settings, b"{not a turn")
    tenant_letter = _dead_letter(client, settings, encode(turn("acme-dead", 0, user="acme")))
    _lag_samples(client, settings)
    for query in (f"sessionKey={KEY}", f"sessionId={OTHER_AGENT_SESSION}", f"sessionId={TENANT_SESSION}&user=acme"):
        wait_for(lambda q=query: rpc.get(f"/v1/sessions/inspect?{q}").json()["assembled"] is not None, f"{query} kept")
    return Seeded(prompt, dead.decode(), undecodable, tenant_letter)


def _dead_letter(client: redis.Redis, settings: Settings, payload: bytes) -> str:
    fields = dead_letter_fields(
        stream=Keys(settings.key_prefix).stream(0),
        entry_id="1700000000001-0",
        payload=payload,
        reason="failed",
        error="OV answered 500 (3 deliveries)",
        deliveries=3,
        consumer="capture-1",
    )
    return client.xadd(Keys(settings.key_prefix).dead_letters(), fields).decode()


def _lag_samples(client: redis.Redis, settings: Settings) -> None:
    """Turns waiting on two shards, sampled at three moments of the last hour."""
    now_ms = int(wait_for(lambda: client.time(), "redis time")[0]) * 1000
    publish(client, settings, [turn(f"lagging-{i}", 0) for i in range(6)])
    for minutes_ago in (45, 30, 15):  # (the RPC's own sampler took this interval's)
        sample_lag(client, settings, now_ms=now_ms - minutes_ago * 60_000 - LAG_SAMPLE_INTERVAL_S)
