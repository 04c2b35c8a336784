"""core.ov.client: every call's request shape and how its answer decodes (table-driven)."""

from __future__ import annotations

import json

import httpx
import pytest

from core.ov.client import OVClient
from core.ov.messages import OtherPart
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
from tests.helpers.ov import Recorder, client, ok

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
        {"archive_id": "archive_001", "overview": "o", "messages": [{"id": "m", "role": "user"}]},
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
                "messages": [{"id": "m1", "role": "user", "parts": [{"type": "custom", "data": 1}]}],
                "estimatedTokens": 42,
                "stats": {"totalArchives": 3, "failedArchives": 1, "activeTokens": 40},
            }
        )
    )
    ctx = await client(rec).get_context("s", token_budget=10)
    assert ctx.estimated_tokens == 42 and ctx.latest_archive_overview == "sum"
    assert (ctx.stats.total_archives, ctx.stats.failed_archives, ctx.stats.active_tokens) == (3, 1, 40)
    assert ctx.messages[0].id == "m1"
    assert ctx.messages[0].parts == [OtherPart(kind="custom", json='{"type":"custom","data":1}')]  # not a failure
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
