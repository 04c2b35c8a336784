"""The OV fake's search, grep, content, upload, resource and skill routes, and its
envelope shapes, over raw HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.fake_ov import S, add, error, http, ok
from workers.dev.fake_ov.app import FakeOV


async def _commit(c: httpx.AsyncClient, sid: str, *contents: str, **body: Any) -> str:
    await add(c, sid, *contents)
    return (await ok(c.post(f"{S}/{sid}/commit", json=body)))["task_id"]


# --- find, grep, content ----------------------------------------------------------------


def _seeded() -> FakeOV:
    fake = FakeOV()
    fake.seed_memory("User prefers green tea in the morning", uri="viking://user/default/memories/preferences/tea.md")
    fake.seed_memory("User drinks coffee at night", uri="viking://user/default/memories/events/coffee.md")
    fake.seed_memory("Agent coder likes tea too", peer="coder")
    fake.seed_memory("Agent writer hates tea", peer="writer")
    fake.seed_memory("Bob prefers tea", user="bob")
    fake.seed_resource("Tea brewing guide", uri="viking://resources/tea-guide")
    return fake


async def test_find_scopes_levels_and_threshold():
    fake = _seeded()
    async with http(fake) as c:
        res = await ok(
            c.post("/api/v1/search/find", json={"query": "green tea", "target_uri": "viking://~/memories", "limit": 10})
        )
        leaves = [h for h in res["memories"] if h["level"] == 2]
        assert [h["uri"] for h in leaves] == ["viking://user/default/memories/preferences/tea.md"]
        assert leaves[0]["score"] == 1.0 and leaves[0]["context_type"] == "memory"
        assert leaves[0]["tags"] == ["memory_type=preferences"]
        assert res["memories"][0] == leaves[0]  # the best leaf outranks the 0.5 directories
        dirs = {(h["uri"], h["level"], h["score"]) for h in res["memories"] if h["level"] != 2}
        root = "viking://user/default/memories"
        assert dirs == {
            (f"{root}/.abstract.md", 0, 0.5),
            (f"{root}/.overview.md", 1, 0.5),
            (f"{root}/preferences/.overview.md", 1, 0.5),
            (f"{root}/events/.overview.md", 1, 0.5),
        }
        assert res["total"] == 5 and res["resources"] == []
        unrelated = await ok(
            c.post("/api/v1/search/find", json={"query": "zebra", "target_uri": "viking://~/memories"})
        )
        assert unrelated["total"] == 4 and all(h["level"] < 2 for h in unrelated["memories"])
        alias = await ok(
            c.post(
                "/api/v1/search/find",
                json={"query": "green tea", "target_uri": "viking://user/default/memories", "limit": 10},
            )
        )
        assert alias == res
        high = await ok(
            c.post(
                "/api/v1/search/find",
                json={"query": "green tea", "target_uri": "viking://resources", "score_threshold": 0.6},
            )
        )
        assert high["total"] == 0
        everywhere = await ok(c.post("/api/v1/search/find", json={"query": "tea", "limit": 1}))
        assert len([h for b in ("memories", "resources") for h in everywhere[b] if h["level"] == 2]) == 1
        above = await ok(c.post("/api/v1/search/find", json={"query": "tea", "score_threshold": 0.51}))
        assert above["total"] > 0 and all(h["level"] == 2 for h in above["memories"] + above["resources"])


async def test_find_peer_view_and_user_isolation():
    fake = _seeded()
    async with http(fake, **{"X-OpenViking-Actor-Peer": "coder"}) as c:
        res = await ok(c.post("/api/v1/search/find", json={"query": "tea", "limit": 20}))
        uris = {h["uri"] for h in res["memories"] if h["level"] == 2}
        assert any("/peers/coder/" in u for u in uris)
        assert not any("/peers/writer/" in u for u in uris)
        assert not any("/user/bob/" in u for u in uris)
        peers = await ok(
            c.post(
                "/api/v1/search/find", json={"query": "tea", "target_uri": "viking://user/default/peers/coder/memories"}
            )
        )
        assert {h["uri"] for h in peers["memories"] if h["level"] == 2} == {m.uri for m in fake.memories(peer="coder")}
        await error(
            c.post("/api/v1/search/find", json={"query": "tea", "target_uri": "viking://user/bob/memories"}),
            403,
            "PERMISSION_DENIED",
        )
    async with http(fake, **{"X-OpenViking-User": "bob"}) as c:
        res = await ok(c.post("/api/v1/search/find", json={"query": "tea", "target_uri": "viking://~/memories"}))
        assert [h["uri"] for h in res["memories"] if h["level"] == 2] == [fake.memories(user="bob")[0].uri]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"query": "x", "target_uri": "viking://user/memories"}, "INVALID_URI"),
        ({"query": "x", "target_uri": "viking://nowhere/a"}, "INVALID_URI"),
        ({"query": "x", "target_uri": "memories"}, "INVALID_URI"),
        ({"query": "x", "top_k": 3}, "INVALID_ARGUMENT"),
        ({"query": "x", "limit": 0}, "INVALID_ARGUMENT"),
        ({"query": "x", "context_type": "nonsense"}, "INVALID_ARGUMENT"),
    ],
)
async def test_find_rejects(body, code):
    async with http(FakeOV()) as c:
        await error(c.post("/api/v1/search/find", json=body), 400, code)


async def test_find_context_type_filter():
    async with http(_seeded()) as c:
        res = await ok(c.post("/api/v1/search/find", json={"query": "tea", "context_type": "resource"}))
        assert res["memories"] == [] and [h["uri"] for h in res["resources"] if h["level"] == 2] == [
            "viking://resources/tea-guide"
        ]


async def test_grep_over_archived_messages():
    fake = FakeOV()
    async with http(fake) as c:
        await _commit(c, "s", "the Deploy key is blue", "nothing here")
        res = await ok(
            c.post(
                "/api/v1/search/grep",
                json={"uri": "viking://~/sessions/s/history", "pattern": "deploy", "case_insensitive": True},
            )
        )
        assert res["count"] == 1 and res["matches"][0]["line"] == 1
        assert res["matches"][0]["uri"] == "viking://user/default/sessions/s/history/archive_001/messages.jsonl"
        assert "the Deploy key is blue" in res["matches"][0]["content"]
        strict = await ok(
            c.post("/api/v1/search/grep", json={"uri": "viking://session/s/history", "pattern": "deploy"})
        )
        assert strict["count"] == 0
        await error(
            c.post("/api/v1/search/grep", json={"uri": "viking://~/sessions/s", "pattern": "("}),
            400,
            "INVALID_ARGUMENT",
        )
        await error(
            c.post("/api/v1/search/grep", json={"uri": "viking://~/sessions/zz/history", "pattern": "x"}),
            404,
            "NOT_FOUND",
        )


async def test_read_abstract_overview_and_rm():
    fake = _seeded()
    uri = "viking://user/default/memories/preferences/tea.md"
    async with http(fake) as c:
        assert (
            await ok(c.get("/api/v1/content/read", params={"uri": "viking://~/memories/preferences/tea.md"}))
            == "User prefers green tea in the morning"
        )
        assert (
            await ok(c.get("/api/v1/content/abstract", params={"uri": uri})) == "User prefers green tea in the morning"
        )
        assert "tea.md" in await ok(
            c.get("/api/v1/content/overview", params={"uri": "viking://~/memories/preferences"})
        )
        assert (
            await ok(c.get("/api/v1/content/abstract", params={"uri": "viking://~/memories"}))
            == "# viking://user/default/memories [Directory abstract is not ready]"
        )
        await error(c.get("/api/v1/content/read", params={"uri": "viking://~/memories/none.md"}), 404, "NOT_FOUND")
        gone = await ok(c.delete("/api/v1/fs", params={"uri": uri}))
        assert (gone["uri"], gone["estimated_deleted_count"]) == (uri, 1) and gone["task_id"]
        again = await ok(c.delete("/api/v1/fs", params={"uri": uri}))
        assert again["estimated_deleted_count"] == 0
        tree = await ok(c.delete("/api/v1/fs", params={"uri": "viking://~/peers", "recursive": "true"}))
        assert tree["estimated_deleted_count"] == 2 and fake.memories(peer="coder") == []


async def test_upload_resource_and_skill_then_find_them():
    fake = FakeOV()
    async with http(fake) as c:
        up = await ok(c.post("/api/v1/resources/temp_upload", files={"file": ("guide.md", b"# Kettle\nboil water")}))
        assert up["temp_file_id"].startswith("upload_") and up["temp_file_id"].endswith(".md")
        res = await ok(c.post("/api/v1/resources", json={"temp_file_id": up["temp_file_id"], "reason": "docs"}))
        assert res["root_uri"] == "viking://resources/guide"
        await error(
            c.post("/api/v1/resources", json={"temp_file_id": up["temp_file_id"]}), 400, "INVALID_ARGUMENT"
        )  # consumed
        await error(c.post("/api/v1/resources", json={"path": "https://x", "bogus": 1}), 400, "INVALID_ARGUMENT")
        await error(c.post("/api/v1/resources", json={}), 400, "INVALID_ARGUMENT")
        skill = await ok(c.post("/api/v1/skills", json={"data": "---\nname: brew\ndescription: brew tea\n---\nSteps"}))
        assert (skill["uri"], skill["name"]) == ("viking://agent/skills/brew", "brew")
        await error(c.post("/api/v1/skills", json={"data": "x", "extra": 1}), 400, "INVALID_ARGUMENT")
        found = await ok(c.post("/api/v1/search/find", json={"query": "boil water kettle"}))
        assert [h["uri"] for h in found["resources"] if h["level"] == 2] == ["viking://resources/guide"]
        found = await ok(c.post("/api/v1/search/find", json={"query": "brew", "target_uri": "viking://agent/skills"}))
        assert [h["uri"] for h in found["skills"] if h["level"] == 2] == ["viking://agent/skills/brew"]


# --- envelopes and extraction results ----------------------------------------------------


async def test_envelope_shapes_follow_0_5_2():
    fake = FakeOV()
    async with http(fake) as c:
        short = (await c.get(f"{S}/nope")).json()
        assert short == {"status": "error", "error": {"code": "NOT_FOUND", "message": "Session nope not found"}}
        full = (await c.post(f"{S}/nope/commit")).json()
        assert full["result"] is None and full["error"]["details"] == {"resource": "nope", "type": "session"}
        bad = (await c.post(f"{S}/s/messages", json={"content": "x"})).json()
        assert "result" not in bad and bad["error"]["details"]["validation_errors"][0]["loc"] == ["body", "role"]
        good = (await c.post(f"{S}/s/messages", json={"role": "user", "content": "x"})).json()
        assert good["status"] == "ok" and good["error"] is None


async def test_nothing_memorable_extracts_nothing():
    fake = FakeOV()
    async with http(fake) as c:
        tid = await _commit(c, "s", "just chatting")
        task = await ok(c.get(f"/api/v1/tasks/{tid}"))
    assert task["result"]["memories_extracted"] == {} and fake.memories() == []
    assert fake.sessions["s"].memories_extracted == {"total": 0}


async def test_directory_hits_stay_inside_the_target():
    async with http(_seeded()) as c:
        res = await ok(
            c.post("/api/v1/search/find", json={"query": "zebra", "target_uri": "viking://~/memories/preferences"})
        )
    assert [(h["uri"], h["level"]) for h in res["memories"]] == [
        ("viking://user/default/memories/preferences/.overview.md", 1)
    ]
