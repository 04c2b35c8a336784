"""The console without a browser: its auth (cookie, redirect, read-only), the inspector's JSON,
the trace kept once per answer, the lag samples and the chart. Real redis-server, FakeOV."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.session import SessionAddress
from tests.helpers.console import CREDENTIALS, OPS_TOKEN, VIEWER_TOKEN
from tests.rpc.test_assemble import oc_turns, ov_turns
from workers.rpc.auth import CONSOLE_COOKIE
from workers.rpc.console.chart import lag_chart, series_of
from workers.rpc.traces import TRACE_HEAD, TRACE_TAIL
from workers.status import LAG_HISTORY_S, LAG_SAMPLE_INTERVAL_S, LagSample, read_lag_history, sample_lag
from workers.store.keys import Keys
from workers.store.recent import read_recent

pytestmark = pytest.mark.redis

SID = "55555555-5555-4555-8555-555555555555"
KEY = "agent:main:inspected"


@pytest.mark.parametrize(
    ("samples", "shards", "points"),
    [
        ([], [], []),
        ([LagSample(1, {"0": 3})], ["0"], [1]),
        ([LagSample(1, {"0": 3, "10": 1}), LagSample(2, {"2": 5, "0": 0})], ["0", "2", "10"], [2, 1, 1]),
    ],
)
def test_the_chart_draws_a_series_per_shard_in_shard_order(samples, shards, points):
    series = series_of(samples)
    assert [s.shard for s in series] == shards and [len(s.points) for s in series] == points
    svg = lag_chart(samples, now_ms=3, span_s=60)
    assert svg.count('class="lag"') == len(shards)
    assert ("no samples yet" in svg) is (not samples)


async def test_lag_is_sampled_once_per_interval_and_kept_for_an_hour(rpc: Any) -> None:
    redis_client, settings = rpc.redis, rpc.settings
    now_ms = 10_000_000_000
    assert sample_lag(redis_client, settings, now_ms=now_ms)
    assert not sample_lag(redis_client, settings, now_ms=now_ms + 1)  # this interval is taken
    later = now_ms + (LAG_HISTORY_S + LAG_SAMPLE_INTERVAL_S) * 1000
    assert sample_lag(redis_client, settings, now_ms=later)
    history = read_lag_history(redis_client, settings)
    assert len(history) == 1 and history[0].at_ms <= later  # the first fell out of the hour
    assert set(history[0].lag) == {str(s) for s in range(settings.shards)}
    assert redis_client.ttl(Keys(settings.key_prefix).lag_history()) > 0


async def test_pages_ask_a_browser_to_sign_in_and_the_api_for_a_token(make_rpc: Any, fake: Any) -> None:
    rpc = await make_rpc(fake, rpc_credentials=CREDENTIALS)
    page = await rpc.client.get("/console")
    assert page.status_code == 303 and page.headers["location"] == "/console/login"
    assert (await rpc.client.get("/v1/sessions/inspect?sessionId=x")).status_code == 401
    wrong = await rpc.client.post("/console/login", data={"token": "nope"})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    signed = await rpc.client.post("/console/login", data={"token": OPS_TOKEN})
    assert signed.status_code == 303 and CONSOLE_COOKIE in signed.headers["set-cookie"]
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert (await rpc.client.get("/console", headers={"cookie": f"{CONSOLE_COOKIE}={OPS_TOKEN}"})).status_code == 200
    # the cookie opens the console only, never the API
    assert (await rpc.client.get("/v1/status", headers={"cookie": f"{CONSOLE_COOKIE}={OPS_TOKEN}"})).status_code == 401
    viewer = {"cookie": f"{CONSOLE_COOKIE}={VIEWER_TOKEN}"}
    page = await rpc.client.get("/console", headers=viewer)
    assert page.status_code == 200 and "Read-only" not in page.text  # nothing to replay: no form at all
    refused = await rpc.client.post("/console/dead-letters/replay", data={"all": "1"}, headers=viewer)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "read_only"


async def test_the_inspector_needs_a_session_and_finds_one_by_its_key(rpc: Any) -> None:
    assert (await rpc.client.get("/v1/sessions/inspect")).json()["error"]["code"] == "session_required"
    blank = await rpc.client.get("/v1/sessions/inspect", params={"sessionKey": "   "})  # names nothing
    assert blank.status_code == 422 and blank.json()["error"]["code"] == "session_required", blank.text
    # an id with a key of blanks: the id names it (schemathesis found the 500 of its lineage's lookup)
    by_id = await rpc.client.get("/v1/sessions/inspect", params={"sessionKey": "   ", "sessionId": "x"})
    assert by_id.status_code == 200 and by_id.json()["ov_session_id"] == "x", by_id.text
    await rpc.ov.add_messages(SID, ov_turns("q0", "a0"))
    rpc.mark_captured(SID, 2)
    body = {"sessionId": SID, "sessionKey": KEY, "messages": oc_turns("q0", "a0"), "prompt": "hi"}
    assert (await rpc.assemble(body)).status_code == 200
    await asyncio.sleep(0.1)  # the trace is written after the answer
    by_key = (await rpc.client.get("/v1/sessions/inspect", params={"sessionKey": KEY})).json()
    assert by_key["ov_session_id"] == SID  # the key names the session its latest answer was for
    assert by_key["assembled"]["reason"] == "assembled" and by_key["snapshot"]["messages"] == 2
    assert [m["preview"] for m in by_key["assembled"]["messages"]] == ["q0", "a0"]
    page = await rpc.client.get("/console/session", params={"key": KEY})
    assert page.status_code == 200 and SID in page.text and "q0" in page.text
    unknown = await rpc.client.get("/console/session", params={"id": "never-seen"})
    assert unknown.status_code == 200 and "No answer kept" in unknown.text


async def test_an_answer_is_kept_once_however_often_it_is_served(rpc: Any) -> None:
    await rpc.ov.add_messages(SID, ov_turns("q0", "a0"))
    rpc.mark_captured(SID, 2)
    body = {"sessionId": SID, "messages": oc_turns("q0", "a0"), "prompt": "hi"}  # a main call
    for _ in range(2):  # a snapshot miss, then the answer cached for the snapshot's version
        assert (await rpc.assemble(body)).status_code == 200
    writes = 0
    recorder = rpc.app.state.services.traces
    original = recorder.assembled

    def counted(*args: Any, **kwargs: Any) -> None:
        nonlocal writes
        writes += 1
        original(*args, **kwargs)

    recorder.assembled = counted
    for _ in range(5):
        assert (await rpc.assemble(body)).status_code == 200
    assert writes == 0  # the cached answer, the same object: already kept
    body["tokenBudget"] = 500  # another answer: kept
    assert (await rpc.assemble(body)).status_code == 200
    assert writes == 1


async def test_no_trace_is_kept_when_switched_off(make_rpc: Any, fake: Any) -> None:
    rpc = await make_rpc(fake, console_trace_ttl_s=0)
    await rpc.ov.add_messages(SID, ov_turns("q0", "a0"))
    answer = await rpc.assemble({"sessionId": SID, "messages": oc_turns("q0", "a0"), "prompt": "hi"})
    assert answer.status_code == 200
    await asyncio.sleep(0.1)
    assert (await rpc.client.get("/v1/sessions/inspect", params={"sessionId": SID})).json()["assembled"] is None


async def test_a_long_answers_trace_keeps_its_ends_and_no_answer_stays_alive(rpc: Any) -> None:
    words = [f"m{i}" for i in range(60)]
    await rpc.ov.add_messages(SID, ov_turns(*words))
    rpc.mark_captured(SID, 60)
    answer = await rpc.assemble({"sessionId": SID, "messages": oc_turns(*words), "prompt": "hi"})
    assert answer.status_code == 200
    await asyncio.sleep(0.1)
    kept = (await rpc.client.get("/v1/sessions/inspect", params={"sessionId": SID})).json()["assembled"]
    previews = [m["preview"] for m in kept["messages"]]
    assert kept["message_count"] == len(answer.json()["messages"]) == 60
    assert previews == [*words[:TRACE_HEAD], *words[-TRACE_TAIL:]] and kept["left_out"] == 60 - len(previews)
    keys = rpc.app.state.services.keys.session(SessionAddress(SID, "main", None), rpc.settings.shards)
    raw = rpc.redis.get(keys.assembled)
    assert len(raw) < 4096  # a few KB however long the session
    page = await rpc.client.get("/console/session", params={"id": SID, "agent": "main"})
    assert f"{60 - len(previews)} message(s) in between, not kept" in page.text
    # what the recorder remembers of the session is the answer's identity, not the answer
    noted = rpc.app.state.services.traces._noted[SID]
    assert isinstance(noted, int)


async def test_a_session_assembled_by_recall_calls_only_shows_what_they_injected(rpc: Any) -> None:
    # The demo's "auto-recall assemble in a NEW session": no main call yet, only recall calls.
    rpc.fake.seed_memory("User prefers Rust for backend services.", category="preferences")
    recall = {
        "sessionId": SID,
        "sessionKey": KEY,
        "messages": [{"role": "user", "content": "which backend language do I like?"}],
    }
    answer = await rpc.assemble(recall)
    assert answer.status_code == 200 and "User prefers Rust" in answer.json()["messages"][-1]["content"]
    await asyncio.sleep(0.1)  # the trace is written after the answer
    inspected = (await rpc.client.get("/v1/sessions/inspect", params={"sessionId": SID})).json()
    assert inspected["assembled"] is None  # no main call: nothing hidden under a recall's answer
    kept = inspected["assembled_recall"]
    assert kept["path"] == "recall" and kept["reason"] == "recalled"
    assert "User prefers Rust" in kept["injected"] and "<relevant-memories>" in kept["injected"]
    page = await rpc.client.get("/console/session", params={"id": SID, "agent": "main"})
    assert page.status_code == 200 and "No answer kept" not in page.text
    assert "What the last recall call answered" in page.text and "User prefers Rust" in page.text
    recent = read_recent(rpc.redis, rpc.settings, None)
    assert [r.ov_session_id for r in recent] == [SID]  # listed among the recent sessions
    # A recall call that found nothing is kept too, under the same key, saying why.
    recall["messages"] = [{"role": "user", "content": "zzz qqq unrelated words entirely"}]
    assert (await rpc.assemble(recall)).status_code == 200
    await asyncio.sleep(0.1)
    kept = (await rpc.client.get("/v1/sessions/inspect", params={"sessionId": SID})).json()["assembled_recall"]
    assert kept["reason"] in ("no_recall_hits", "recalled"), kept


async def test_a_trace_keeps_no_secret_the_host_sent_and_says_what_was_masked(rpc: Any) -> None:
    aws = "AKIA" + "IOSFODNN7EXAMPLE"
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    said = f"deploy with key {aws} and the session token {jwt} please, " + "then report back " * 20
    body = {"sessionId": SID, "messages": oc_turns("q0", "a0", said, "done"), "prompt": "hi"}
    assert (await rpc.assemble(body)).status_code == 200

    async def kept() -> dict[str, Any] | None:
        return (await rpc.client.get("/v1/sessions/inspect", params={"sessionId": SID})).json()["assembled"]

    trace = None
    for _ in range(200):  # the trace is written after the answer, by a task of the RPC's loop
        trace = await kept()
        if trace is not None:
            break
        await asyncio.sleep(0.02)
    assert trace is not None
    assert aws not in str(trace) and jwt not in str(trace)
    assert trace["masked"] == {"aws_access_key": 1, "jwt": 1}
    assert "<redacted:aws_access_key#1>" in trace["messages"][2]["preview"]  # redacted before it was cut
    page = await rpc.client.get("/console/session", params={"id": SID, "agent": "main"})
    assert "2 secrets masked in this turn: aws_access_key, jwt" in page.text and aws not in page.text
