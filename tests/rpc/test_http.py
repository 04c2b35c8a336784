"""The HTTP surface: input errors, health, metrics, the OpenAPI spec, the CLI wiring."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pytest
import redis

from core.config import Settings
from core.events import CommitOutcome, encode
from tests.helpers.redis_faults import REDIS_CONNECTION, raised_in
from workers.cli import build_parser
from workers.rpc.app import create_app
from workers.rpc.serve import add_rpc_arguments
from workers.store.connection import connect, connect_async
from workers.store.keys import Keys

pytestmark = pytest.mark.redis


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        (b"{not json", 400, "invalid_json", None),
        (b"[1, 2]", 400, "invalid_body", None),
        (b'{"messages": []}', 422, "invalid_request", "sessionId"),
        (b'{"sessionId": ""}', 422, "invalid_request", "sessionId"),
        (b'{"sessionId": 7}', 422, "invalid_request", "sessionId"),
        (b'{"sessionId": "s", "messages": "hi"}', 422, "invalid_request", "messages"),
        (b'{"sessionId": "s", "messages": [1]}', 422, "invalid_request", "messages[0]"),
        (b'{"sessionId": "s", "tokenBudget": "big"}', 422, "invalid_request", "tokenBudget"),
    ],
    ids=[
        "malformed",
        "array",
        "no-session",
        "empty-session",
        "int-session",
        "messages-string",
        "message-not-object",
        "budget-string",
    ],
)
async def test_bad_assemble_input_names_the_field(
    rpc: Any, body: bytes, status: int, code: str, field: str | None
) -> None:
    r = await rpc.client.post("/v1/assemble", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    error = r.json()["error"]
    assert error["code"] == code and error.get("field") == field
    assert error["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/compact", {}, "sessionId"),
        ("/v1/compact", {"sessionId": "s", "currentTokenCount": "many"}, "currentTokenCount"),
        ("/v1/tools/memory_recall", {"params": []}, "params"),
    ],
)
async def test_bad_compact_and_tool_input_is_422(rpc: Any, path: str, body: Any, field: str) -> None:
    r = await rpc.client.post(path, json=body)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == field


async def test_unknown_route_and_method_are_json_errors(rpc: Any) -> None:
    r = await rpc.client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await rpc.client.get("/v1/assemble")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_extra_fields_from_openclaw_are_ignored(rpc: Any) -> None:
    r = await rpc.assemble({"sessionId": "s", "messages": [], "sessionFile": "/x", "prompt": "p"})
    assert r.status_code == 200


async def test_healthz_ok_then_degraded_when_ov_is_down(rpc: Any) -> None:
    r = await rpc.client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "redis": "ok", "ov": "ok"}
    rpc.fake.down = True
    r = await rpc.client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "degraded" and r.json()["ov"].startswith("unreachable")


async def test_without_redis_healthz_is_down_status_503_and_assemble_still_answers(fake: Any, redis_url: str) -> None:
    import httpx

    # as the app sets up its own clients
    dead = Settings(redis_url="redis://127.0.0.1:1/0")
    app = create_app(
        Settings(redis_url=redis_url),
        redis=connect_async(dead, fail_fast=True),
        commit_redis=connect(dead, fail_fast=True),
        ov_transport=fake.transport(),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://rpc") as client:
        r = await client.get("/healthz")
        assert r.status_code == 503 and r.json()["status"] == "down"
        # A route that needs Redis says so: 503, never a 500.
        r = await client.get("/v1/status")
        assert r.status_code == 503 and r.json()["error"]["code"] == "redis_unavailable", r.text
        assert "127.0.0.1:1" in r.json()["error"]["message"]
        # Assemble still answers: it passes the messages through.
        r = await client.post("/v1/assemble", json={"sessionId": "s", "messages": [], "prompt": "p"})
        assert r.status_code == 200
    await app.state.services.ov.aclose()


async def test_without_redis_a_held_import_adds_nothing_to_what_ov_holds(fake: Any, redis_url: str) -> None:
    """The host bootstraps on a session's second turn: the plugin may still hold an import of
    the turn OV has already. With Redis away it is not appended on top of OV's copy."""
    import httpx

    from core.events import TurnEvent

    dead = Settings(redis_url="redis://127.0.0.1:1/0")
    app = create_app(
        Settings(redis_url=redis_url),
        redis=connect_async(dead, fail_fast=True),
        commit_redis=connect(dead, fail_fast=True),
        ov_transport=fake.transport(),
    )
    first = [{"role": "user", "content": "Local run with Redis up."}, {"role": "assistant", "content": "Noted."}]
    async with httpx.AsyncClient(transport=fake.transport(), base_url="http://ov") as ov:
        parts = [{"role": m["role"], "parts": [{"type": "text", "text": m["content"]}]} for m in first]
        (await ov.post("/api/v1/sessions/s2/messages/batch", json={"messages": parts})).raise_for_status()
    held = TurnEvent(
        event_id="import-s2", session_id="s2", messages=first, import_transcript=True, published_at=time.time()
    )
    call = {
        "sessionId": "s2",
        "messages": [],
        "prompt": "second turn",
        "heldTurns": [json.loads(encode(held))],
        "recentTurns": [],
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://rpc") as client:
        r = await client.post("/v1/assemble", json=call)
    assert r.status_code == 200, r.text
    said = json.dumps(r.json()["messages"])
    assert said.count("Local run with Redis up.") == 1, said
    await app.state.services.ov.aclose()


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [
        (redis.ConnectionError("Connection reset by peer"), 503, "redis_unavailable"),
        (
            raised_in(REDIS_CONNECTION, AttributeError("'NoneType' object has no attribute 'writelines'")),
            503,
            "redis_unavailable",
        ),
        (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), 500, "internal"),
        (AttributeError("a bug of ours"), 500, "internal"),
    ],
    ids=["reset", "leaked-by-redis-py", "refused-command", "our-bug"],
)
async def test_redis_faults_on_any_route_are_503_and_bugs_500(
    fake: Any, redis_url: str, monkeypatch: Any, raised: BaseException, status: int, code: str
) -> None:
    import httpx

    def fail(*_: Any) -> None:
        raise raised

    monkeypatch.setattr("workers.rpc.app.read_status", fail)
    app = create_app(Settings(redis_url=redis_url), ov_transport=fake.transport())
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://rpc") as client:
        r = await client.get("/v1/status")
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
        assert "Traceback" not in r.text
    await app.state.services.ov.aclose()


async def test_metrics_report_stream_lag_and_commit_outcomes(rpc: Any) -> None:
    keys = Keys(rpc.settings.key_prefix)
    stream = keys.stream(0)
    rpc.redis.xgroup_create(stream, rpc.settings.consumer_group, id="0", mkstream=True)
    old_ms = int(time.time() * 1000) - 60_000  # the oldest event waits a minute already
    for i in range(3):
        rpc.redis.xadd(stream, {"e": b"{}"}, id=f"{old_ms + i}-0")
    rpc.redis.xreadgroup(rpc.settings.consumer_group, "c1", {stream: ">"}, count=1)
    for status in ("completed", "completed", "failed"):
        outcome = CommitOutcome(commit_id="c", ov_session_id="s", agent_id="main", status=status)
        rpc.redis.xadd(keys.commit_outcomes(), {"o": encode(outcome)})
    await rpc.assemble({"sessionId": "s", "messages": [], "prompt": "p"})

    text = (await rpc.client.get("/metrics")).text
    assert rpc.metric(text, 'ovstream_stream_lag{shard="0"}') == 2.0
    assert rpc.metric(text, 'ovstream_stream_pending{shard="0"}') == 1.0
    assert rpc.metric(text, 'ovstream_stream_length{shard="0"}') == 3.0
    assert (rpc.metric(text, 'ovstream_stream_oldest_unapplied_seconds{shard="0"}') or 0) >= 60.0
    assert rpc.metric(text, 'ovstream_stream_oldest_unapplied_seconds{shard="1"}') == 0.0
    assert rpc.metric(text, 'ovstream_commit_outcomes_total{status="completed"}') == 2.0
    assert rpc.metric(text, 'ovstream_commit_outcomes_total{status="failed"}') == 1.0
    assert rpc.metric(text, 'ovstream_assemble_seconds_count{path="full"}') == 1.0
    # Outcomes are read incrementally: a later scrape adds only the new ones.
    rpc.redis.xadd(
        keys.commit_outcomes(),
        {"o": encode(CommitOutcome(commit_id="d", ov_session_id="s", agent_id="main", status="timeout"))},
    )
    text = (await rpc.client.get("/metrics")).text
    assert rpc.metric(text, 'ovstream_commit_outcomes_total{status="completed"}') == 2.0
    assert rpc.metric(text, 'ovstream_commit_outcomes_total{status="timeout"}') == 1.0


async def test_metrics_report_dead_letters_waiting_and_expired(rpc: Any) -> None:
    keys = Keys(rpc.settings.key_prefix)
    text = (await rpc.client.get("/metrics")).text
    assert rpc.metric(text, "ovstream_dead_letters") == 0.0
    assert rpc.metric(text, "ovstream_dead_letter_oldest_seconds") == 0.0
    two_hours_ago = int(time.time() * 1000) - 7_200_000
    rpc.redis.xadd(keys.dead_letters(), {"reason": b"failed"}, id=f"{two_hours_ago}-0")
    rpc.redis.xadd(keys.dead_letters(), {"reason": b"failed"})
    rpc.redis.incrby(keys.dead_letters_expired(), 3)
    text = (await rpc.client.get("/metrics")).text
    assert rpc.metric(text, "ovstream_dead_letters") == 2.0
    assert (rpc.metric(text, "ovstream_dead_letter_oldest_seconds") or 0) >= 7_200
    assert rpc.metric(text, "ovstream_dead_letters_expired_total") == 3.0


async def test_openapi_spec_documents_the_endpoints(rpc: Any) -> None:
    spec = (await rpc.client.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in ("/v1/assemble", "/v1/compact", "/v1/tools/{name}", "/v1/tools", "/healthz", "/metrics"):
        assert path in paths
    assemble_body = paths["/v1/assemble"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert assemble_body["required"] == ["sessionId"]
    assert {"messages", "prompt", "availableTools", "tokenBudget"} <= set(assemble_body["properties"])


def test_cli_rpc_has_host_and_port() -> None:
    args = build_parser("rpc").parse_args(["rpc", "--host", "0.0.0.0", "--port", "9001"])
    assert (args.host, args.port) == ("0.0.0.0", 9001)
    parser = argparse.ArgumentParser()
    add_rpc_arguments(parser)
    assert parser.parse_args([]).port is None
