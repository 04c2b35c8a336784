"""OVClient through httpx.MockTransport: request shapes, decoding, errors, retries, chunking."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from core.config import Settings
from core.ov.client import OVClient, OVError, OVUnavailable
from core.ov.sync_client import OVSyncClient
from tests.helpers.ov import Recorder, client, err, ok
from workers.dev.fake_ov.app import FakeOV

# --- identity and construction ---------------------------------------------------------


async def test_dev_mode_headers_and_no_api_key():
    rec = Recorder(ok({}))
    await client(rec, account="acme", user="alice").get_session("s")
    h = rec.last.headers
    assert h["X-OpenViking-Account"] == "acme" and h["X-OpenViking-User"] == "alice"
    assert "X-API-Key" not in h and "X-OpenViking-Actor-Peer" not in h


async def test_api_key_mode_sends_key_not_dev_headers():
    rec = Recorder(ok({}))
    await client(rec, api_key="k-1").get_task("t")
    assert rec.last.headers["X-API-Key"] == "k-1"
    assert "X-OpenViking-Account" not in rec.last.headers


class _Pool(httpx.MockTransport):
    """A MockTransport that knows whether it was closed (a real pool refuses calls then)."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


async def test_scoped_shares_pool_and_adds_peer_and_key():
    rec = Recorder(ok({}))
    pool = _Pool(rec)
    base = OVClient("http://ov.test:1933", transport=pool, api_key="k-1", backoff=0)
    agent = base.scoped(peer="agent_a")
    other = agent.scoped(api_key="k-2")
    assert agent._transport is pool and other._transport is pool
    await agent.get_task("t")
    assert rec.last.headers["X-OpenViking-Actor-Peer"] == "agent_a"
    assert rec.last.headers["X-API-Key"] == "k-1"
    await other.get_task("t")
    assert rec.last.headers["X-API-Key"] == "k-2"
    assert rec.last.headers["X-OpenViking-Actor-Peer"] == "agent_a"
    await agent.aclose()  # a view does not close the shared pool
    assert not pool.closed
    await base.get_task("t")
    assert "X-OpenViking-Actor-Peer" not in rec.last.headers
    await base.aclose()
    assert pool.closed


async def test_from_settings_takes_every_knob():
    s = Settings(
        base_url="http://ov.example:9/",
        api_key="sk",
        ov_timeout_s=7.5,
        ov_retries=1,
        ov_backoff_s=0.0,
        ov_batch_max=7,
        account="a",
        user="u",
    )
    rec = Recorder(ok({}))
    c = OVClient.from_settings(s, transport=httpx.MockTransport(rec))
    assert (c.base_url, c.api_key, c.timeout, c.retries, c.backoff, c.batch_max) == (
        "http://ov.example:9",
        "sk",
        7.5,
        1,
        0.0,
        7,
    )
    await c.get_task("t")
    assert rec.last.extensions["timeout"]["read"] == 7.5
    assert str(rec.last.url) == "http://ov.example:9/api/v1/tasks/t"


async def test_async_context_manager_closes_pool():
    pool = _Pool(Recorder())
    async with OVClient("http://ov.test:1933", transport=pool):
        pass
    assert pool.closed


def test_a_pool_of_its_own_speaks_real_http_and_closes():
    """Without a test's transport each client has a pool of its own (httpx's HTTP transports)."""
    assert isinstance(OVClient("http://ov.test:1933")._transport, httpx.AsyncHTTPTransport)
    assert isinstance(OVSyncClient("http://ov.test:1933")._transport, httpx.HTTPTransport)


# --- batching --------------------------------------------------------------------------


def _batch_answer(request: httpx.Request) -> httpx.Response:
    n = len(json.loads(request.content)["messages"])
    _batch_answer.total += n  # type: ignore[attr-defined]
    return ok(
        {
            "session_id": "s",
            "message_count": _batch_answer.total,
            "added": n,  # type: ignore[attr-defined]
            "pending_tokens": _batch_answer.total,
        }
    )  # type: ignore[attr-defined]


async def test_add_messages_chunks_at_100_and_sums_added():
    _batch_answer.total = 0  # type: ignore[attr-defined]
    rec = Recorder(_batch_answer)
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(250)]
    out = await client(rec).add_messages("s", msgs)
    sizes = [len(rec.body(i)["messages"]) for i in range(len(rec.requests))]
    assert sizes == [100, 100, 50]
    assert rec.body(2)["messages"][0]["content"] == "m200"
    assert (out.added, out.message_count, out.pending_tokens) == (250, 250, 250)


async def test_add_messages_respects_smaller_batch_max():
    _batch_answer.total = 0  # type: ignore[attr-defined]
    rec = Recorder(_batch_answer)
    await client(rec, batch_max=7).add_messages("s", [{"role": "user", "content": "x"}] * 15)
    assert [len(rec.body(i)["messages"]) for i in range(3)] == [7, 7, 1]


async def test_add_messages_failure_reports_what_was_stored():
    _batch_answer.total = 0  # type: ignore[attr-defined]
    rec = Recorder(_batch_answer, err(503, "UNAVAILABLE"), _batch_answer)
    with pytest.raises(OVUnavailable) as info:
        await client(rec, retries=3).add_messages("s", [{"role": "user", "content": "x"}] * 150)
    assert info.value.added == 100
    assert len(rec.requests) == 2  # no retry of the failed chunk


async def test_add_messages_exactly_100_is_one_call():
    _batch_answer.total = 0  # type: ignore[attr-defined]
    rec = Recorder(_batch_answer)
    await client(rec).add_messages("s", [{"role": "user", "content": "x"}] * 100)
    assert len(rec.requests) == 1


# --- uploads and logging ---------------------------------------------------------------


async def test_temp_upload_is_multipart_file():
    rec = Recorder(ok({"temp_file_id": "upload_abc.md"}))
    assert await client(rec).temp_upload("notes.md", b"# hi") == "upload_abc.md"
    req = rec.last
    assert req.url.path == "/api/v1/resources/temp_upload"
    assert req.headers["content-type"].startswith("multipart/form-data")
    assert b'name="file"; filename="notes.md"' in req.content and b"# hi" in req.content


async def test_temp_upload_without_id_is_bad_response():
    with pytest.raises(OVError) as info:
        await client(Recorder(ok({}))).temp_upload("a", b"")
    assert info.value.code == "BAD_RESPONSE"


async def test_each_call_is_logged_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="core.ov.client")
    with pytest.raises(OVError):
        await client(Recorder(err(404, "NOT_FOUND")), retries=0).get_task("t9")
    line = next(r.getMessage() for r in caplog.records if r.name == "core.ov.client" and "/tasks/t9" in r.getMessage())
    assert line.startswith("OV GET /api/v1/tasks/t9 -> 404 in ") and line.endswith(" ms")


# --- against the fake ------------------------------------------------------------------


async def test_round_trip_against_fake():
    fake = FakeOV()
    async with OVClient("http://ov", transport=fake.transport(), backoff=0) as ov:
        await ov.create_session("s1")
        with pytest.raises(OVError) as dup:
            await ov.create_session("s1")
        assert (dup.value.code, dup.value.status) == ("ALREADY_EXISTS", 409)
        added = await ov.add_messages(
            "s1", [{"role": "user", "content": "remember I prefer tea"}, {"role": "assistant", "content": "ok"}]
        )
        assert added.added == 2
        commit = await ov.commit("s1", keep_recent_count=1)
        assert commit.archive_uri == "viking://user/default/sessions/s1/history/archive_001"
        task = await ov.get_task(commit.task_id)
        assert task.status == "completed"
        found = await ov.find("tea", target_uri="viking://~/memories", limit=5)
        assert [h.uri for h in found.memories if h.level == 2] == [
            "viking://user/default/memories/preferences/mem_1.md"
        ]
        ctx = await ov.get_context("s1", token_budget=1000)
        assert [m.text for m in ctx.messages] == ["ok"]
        with pytest.raises(OVError) as bad:
            await ov.find("tea", target_uri="viking://user/memories", limit=5)
        assert bad.value.code == "INVALID_URI"
        fake.fail_next(2, route="get_session")
        state = await ov.get_session("s1")  # retried through two 503s
        assert state.commit_count == 1
        fake.down = True
        with pytest.raises(OVUnavailable):
            await ov.commit("s1")
