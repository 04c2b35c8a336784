"""OVClient through httpx.MockTransport: request shapes, decoding, errors, retries, chunking."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from core.config import Settings
from core.ov.client import OVClient, OVError, OVUnavailable
from core.ov.models import (
    AddMessagesResult,
    Archive,
    CommitAccepted,
    FindResult,
    GrepResult,
    SessionContext,
    SessionState,
    TaskState,
)
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


async def test_scoped_shares_pool_and_adds_peer_and_key():
    rec = Recorder(ok({}))
    base = client(rec, api_key="k-1")
    agent = base.scoped(peer="agent_a")
    other = agent.scoped(api_key="k-2")
    assert agent._http is base._http and other._http is base._http
    await agent.get_task("t")
    assert rec.last.headers["X-OpenViking-Actor-Peer"] == "agent_a"
    assert rec.last.headers["X-API-Key"] == "k-1"
    await other.get_task("t")
    assert rec.last.headers["X-API-Key"] == "k-2"
    assert rec.last.headers["X-OpenViking-Actor-Peer"] == "agent_a"
    await agent.aclose()  # a view does not close the shared pool
    await base.get_task("t")
    assert "X-OpenViking-Actor-Peer" not in rec.last.headers
    await base.aclose()
    with pytest.raises(RuntimeError):
        await base._http.get("/health")


def test_from_settings_takes_every_knob():
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
    c = OVClient.from_settings(s, transport=httpx.MockTransport(Recorder()))
    assert (c.base_url, c.api_key, c.timeout, c.retries, c.backoff, c.batch_max) == (
        "http://ov.example:9",
        "sk",
        7.5,
        1,
        0.0,
        7,
    )
    assert c._http.timeout.read == 7.5


async def test_async_context_manager_closes_pool():
    async with client(Recorder()) as c:
        pass
    assert c._http.is_closed


# --- request shapes and decoding -------------------------------------------------------

SHAPES = [
    # (call, method, path, query, body, canned result, expected type)
    (
        lambda c: c.create_session("s1"),
        "POST",
        "/api/v1/sessions",
        {},
        {"session_id": "s1"},
        {"session_id": "s1", "uri": "viking://user/u/sessions/s1"},
        dict,
    ),
    (lambda c: c.create_session(), "POST", "/api/v1/sessions", {}, {}, {"session_id": "x"}, dict),
    (
        lambda c: c.get_session("s1"),
        "GET",
        "/api/v1/sessions/s1",
        {},
        None,
        {"message_count": 3, "pending_tokens": 9, "extra": 1},
        SessionState,
    ),
    (
        lambda c: c.get_session("s1", auto_create=True),
        "GET",
        "/api/v1/sessions/s1",
        {"auto_create": "true"},
        None,
        {},
        SessionState,
    ),
    (
        lambda c: c.add_message("s1", {"role": "user", "parts": [{"type": "text", "text": "hi"}]}),
        "POST",
        "/api/v1/sessions/s1/messages",
        {},
        {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
        {"session_id": "s1", "message_count": 1, "pending_tokens": 1},
        AddMessagesResult,
    ),
    (
        lambda c: c.add_messages("s1", [{"role": "user", "content": "a"}]),
        "POST",
        "/api/v1/sessions/s1/messages/batch",
        {},
        {"messages": [{"role": "user", "content": "a"}]},
        {"session_id": "s1", "message_count": 1, "pending_tokens": 1, "added": 1},
        AddMessagesResult,
    ),
    (
        lambda c: c.commit("s1", keep_recent_count=10, enable_working_memory=True),
        "POST",
        "/api/v1/sessions/s1/commit",
        {},
        {"keep_recent_count": 10, "enable_working_memory": True},
        {"status": "accepted", "task_id": "t1", "archive_uri": "viking://x", "archived": True},
        CommitAccepted,
    ),
    (
        lambda c: c.commit("s1"),
        "POST",
        "/api/v1/sessions/s1/commit",
        {},
        {},
        {"status": "skipped", "task_id": None, "archive_uri": None, "archived": False, "reason": "no_messages"},
        CommitAccepted,
    ),
    (
        lambda c: c.get_task("t1"),
        "GET",
        "/api/v1/tasks/t1",
        {},
        None,
        {"task_id": "t1", "status": "failed", "error": "llm died", "result": None},
        TaskState,
    ),
    (
        lambda c: c.get_context("s1", token_budget=5000),
        "GET",
        "/api/v1/sessions/s1/context",
        {"token_budget": "5000"},
        None,
        {
            "latest_archive_overview": "ov",
            "messages": [],
            "estimatedTokens": 12,
            "stats": {"totalArchives": 2, "failedArchives": 1},
        },
        SessionContext,
    ),
    (
        lambda c: c.get_archive("s1", "archive_001"),
        "GET",
        "/api/v1/sessions/s1/archives/archive_001",
        {},
        None,
        {"archive_id": "archive_001", "overview": "o", "messages": [{"id": "m"}]},
        Archive,
    ),
    (lambda c: c.delete_session("s1"), "DELETE", "/api/v1/sessions/s1", {}, None, {"session_id": "s1"}, dict),
    (
        lambda c: c.find("tea", target_uri="viking://~/memories", limit=20, score_threshold=0.0, context_type="memory"),
        "POST",
        "/api/v1/search/find",
        {},
        {
            "query": "tea",
            "target_uri": "viking://~/memories",
            "limit": 20,
            "score_threshold": 0.0,
            "context_type": "memory",
        },
        {
            "memories": [
                {"uri": "viking://u/m.md", "level": 2, "score": 0.7, "abstract": "a", "context_type": "memory"}
            ],
            "resources": [],
            "skills": [],
            "total": 1,
        },
        FindResult,
    ),
    (
        lambda c: c.find("tea", target_uri="viking://resources", limit=5),
        "POST",
        "/api/v1/search/find",
        {},
        {"query": "tea", "target_uri": "viking://resources", "limit": 5},
        {},
        FindResult,
    ),
    (
        lambda c: c.grep("viking://~/sessions/s1/history", "te\\.a"),
        "POST",
        "/api/v1/search/grep",
        {},
        {"uri": "viking://~/sessions/s1/history", "pattern": "te\\.a", "case_insensitive": True},
        {"matches": [{"line": 3, "uri": "viking://x", "content": "tea"}], "count": 1},
        GrepResult,
    ),
    (
        lambda c: c.read("viking://~/memories/a.md"),
        "GET",
        "/api/v1/content/read",
        {"uri": "viking://~/memories/a.md"},
        None,
        "full text",
        str,
    ),
    (lambda c: c.abstract("viking://r"), "GET", "/api/v1/content/abstract", {"uri": "viking://r"}, None, "abs", str),
    (lambda c: c.overview("viking://r"), "GET", "/api/v1/content/overview", {"uri": "viking://r"}, None, "ovw", str),
    (
        lambda c: c.rm("viking://~/memories/a.md"),
        "DELETE",
        "/api/v1/fs",
        {"uri": "viking://~/memories/a.md", "recursive": "false"},
        None,
        {"uri": "viking://user/u/memories/a.md", "estimated_deleted_count": 1},
        dict,
    ),
    (
        lambda c: c.rm("viking://resources/d", recursive=True),
        "DELETE",
        "/api/v1/fs",
        {"uri": "viking://resources/d", "recursive": "true"},
        None,
        {"estimated_deleted_count": 0},
        dict,
    ),
    (
        lambda c: c.add_resource("https://example.com/a.md", to="viking://resources/a", reason="r", wait=True),
        "POST",
        "/api/v1/resources",
        {},
        {"path": "https://example.com/a.md", "to": "viking://resources/a", "reason": "r", "wait": True},
        {"root_uri": "viking://resources/a"},
        dict,
    ),
    (
        lambda c: c.add_resource("upload_" + "a" * 32 + ".md"),
        "POST",
        "/api/v1/resources",
        {},
        {"temp_file_id": "upload_" + "a" * 32 + ".md"},
        {"root_uri": "viking://resources/a"},
        dict,
    ),
    (
        lambda c: c.add_resource(temp_file_id="shared_x"),
        "POST",
        "/api/v1/resources",
        {},
        {"temp_file_id": "shared_x"},
        {},
        dict,
    ),
    (
        lambda c: c.add_skill("---\nname: s\n---\n", wait=False),
        "POST",
        "/api/v1/skills",
        {},
        {"data": "---\nname: s\n---\n", "wait": False},
        {"root_uri": "viking://agent/skills/s"},
        dict,
    ),
    (
        lambda c: c.add_skill(temp_file_id="upload_x.md"),
        "POST",
        "/api/v1/skills",
        {},
        {"temp_file_id": "upload_x.md"},
        {},
        dict,
    ),
    (
        lambda c: c.admin_create_account("acme", "boss"),
        "POST",
        "/api/v1/admin/accounts",
        {},
        {"account_id": "acme", "admin_user_id": "boss"},
        {"user_key": "k"},
        dict,
    ),
    (
        lambda c: c.admin_create_user("acme", "bob"),
        "POST",
        "/api/v1/admin/accounts/acme/users",
        {},
        {"user_id": "bob", "role": "user"},
        {"user_key": "k2"},
        dict,
    ),
]


@pytest.mark.parametrize(("call", "method", "path", "query", "body", "result", "rtype"), SHAPES)
async def test_request_shape_and_decoding(call, method, path, query, body, result, rtype):
    rec = Recorder(ok(result))
    out = await call(client(rec))
    req = rec.last
    assert (req.method, req.url.path) == (method, path)
    assert dict(req.url.params) == query
    if body is None:
        assert req.content == b""
    else:
        assert json.loads(req.content) == body
    assert isinstance(out, rtype)
    if rtype in (dict, str):
        assert out == result


async def test_decoded_fields():
    rec = Recorder(
        ok(
            {
                "latest_archive_overview": "sum",
                "pre_archive_abstracts": [],
                "messages": [{"id": "m1", "role": "user", "parts": []}],
                "estimatedTokens": 42,
                "stats": {"totalArchives": 3, "failedArchives": 1, "activeTokens": 40},
            }
        )
    )
    ctx = await client(rec).get_context("s", token_budget=10)
    assert ctx.estimated_tokens == 42 and ctx.latest_archive_overview == "sum"
    assert (ctx.stats.total_archives, ctx.stats.failed_archives, ctx.stats.active_tokens) == (3, 1, 40)
    assert ctx.messages[0]["id"] == "m1"
    rec.answers = [ok({"task_id": "t", "status": "completed", "result": {"memories_extracted": {"total": 2}}})]
    task = await client(rec).get_task("t")
    assert task.done and task.result == {"memories_extracted": {"total": 2}}
    rec.answers = [ok({"memories": [{"uri": "d", "level": 1, "score": 0.9}, {"uri": "m", "score": 0.5}]})]
    found = await client(rec).find("q", target_uri="viking://~/memories", limit=3)
    assert [(h.uri, h.level) for h in found.all_hits()] == [("d", 1), ("m", 2)]


async def test_add_message_counts_one_added():
    rec = Recorder(ok({"session_id": "s", "message_count": 4, "pending_tokens": 20}))
    out = await client(rec).add_message("s", {"role": "user", "content": "x"})
    assert (out.message_count, out.pending_tokens, out.added) == (4, 20, 1)


async def test_path_segments_are_url_encoded():
    rec = Recorder(ok({}))
    c = client(rec)
    await c.get_session("a/b c?x#y")
    assert rec.last.url.raw_path == b"/api/v1/sessions/a%2Fb%20c%3Fx%23y"
    await c.get_task("t/1")
    assert rec.last.url.raw_path == b"/api/v1/tasks/t%2F1"
    await c.get_archive("s/1", "archive_001")
    assert rec.last.url.raw_path == b"/api/v1/sessions/s%2F1/archives/archive_001"


async def test_base_url_path_prefix_is_kept():
    rec = Recorder(ok({}))
    await OVClient("http://gw/ov/", transport=httpx.MockTransport(rec)).get_task("t")
    assert rec.last.url.path == "/ov/api/v1/tasks/t"


async def test_health_is_not_enveloped():
    rec = Recorder(httpx.Response(200, json={"status": "ok", "healthy": True, "version": "0.5.2"}))
    assert (await client(rec).health())["version"] == "0.5.2"
    assert rec.last.url.path == "/health"


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
    line = next(r.getMessage() for r in caplog.records if "/api/v1/tasks/t9" in r.getMessage())
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
        assert [m["parts"][0]["text"] for m in ctx.messages] == ["ok"]
        with pytest.raises(OVError) as bad:
            await ov.find("tea", target_uri="viking://user/memories", limit=5)
        assert bad.value.code == "INVALID_URI"
        fake.fail_next(2, route="get_session")
        state = await ov.get_session("s1")  # retried through two 503s
        assert state.commit_count == 1
        fake.down = True
        with pytest.raises(OVUnavailable):
            await ov.commit("s1")
