"""POST /v1/tools/{name}: the agent tools against a real redis-server and the FakeOV."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers.dev.fake_ov.app import FakeOV

pytestmark = pytest.mark.redis

SID = "sess-t"
ALL_TOOLS = {
    "memory_recall",
    "memory_store",
    "memory_forget",
    "memory_search",
    "add_resource",
    "add_skill",
    "ov_archive_search",
    "ov_archive_expand",
}


def text_of(response: Any) -> str:
    body = response.json()
    assert response.status_code == 200, body
    [block] = body["content"]
    assert block["type"] == "text"
    return block["text"]


def call(params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"sessionId": SID, "params": params, **extra}


# --- the shared rules -------------------------------------------------------------------------


async def test_tools_are_listed_with_their_parameters(rpc: Any) -> None:
    tools = (await rpc.client.get("/v1/tools")).json()["tools"]
    assert {t["name"] for t in tools} == ALL_TOOLS
    recall = next(t for t in tools if t["name"] == "memory_recall")
    assert "query" in recall["parameters"]["properties"]


async def test_unknown_tool_is_404_naming_the_tools(rpc: Any) -> None:
    r = await rpc.tool("memory_nope", call({}))
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["code"] == "unknown_tool"
    assert all(name in error["message"] for name in ALL_TOOLS)


@pytest.mark.parametrize(
    ("tool", "params", "field"),
    [
        ("memory_recall", {}, "params.query"),
        ("memory_recall", {"query": "x", "limit": 0}, "params.limit"),
        ("memory_store", {"text": ""}, "params.text"),
        ("memory_store", {"text": "t", "role": "system"}, "params.role"),
        ("memory_forget", {}, "params"),
        ("add_resource", {"content": "x"}, "params"),
        ("ov_archive_expand", {"archiveId": "../etc"}, "params.archiveId"),
        ("ov_archive_search", {"query": 5}, "params.query"),
    ],
)
async def test_bad_params_are_422_naming_the_field(rpc: Any, tool: str, params: Any, field: str) -> None:
    r = await rpc.tool(tool, call(params))
    assert r.status_code == 422
    assert r.json()["error"]["field"] == field
    assert rpc.fake.calls == []


async def test_bypassed_session_skips_ov(make_rpc: Any, fake: FakeOV) -> None:
    rpc = await make_rpc(fake, bypass_session_patterns=("agent:*:cron:**",))
    r = await rpc.tool("memory_recall", call({"query": "anything"}, sessionKey="agent:main:cron:x"))
    assert r.json()["details"]["action"] == "bypassed"
    assert fake.calls == []


async def test_ov_down_is_503(rpc: Any) -> None:
    rpc.fake.down = True
    r = await rpc.tool("memory_recall", call({"query": "anything at all"}))
    assert r.status_code == 503 and r.json()["error"]["code"] == "ov_unavailable"


async def test_ov_client_errors_keep_ovs_status_and_code(rpc: Any) -> None:
    r = await rpc.tool("memory_recall", call({"query": "q", "targetUri": "viking://user/memories"}))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "INVALID_URI"


async def test_ov_server_errors_are_502(rpc: Any) -> None:
    rpc.fake.fail_next(2, status=500, code="INTERNAL", route="find")
    r = await rpc.tool("memory_search", call({"query": "docs"}))
    assert r.status_code == 502 and r.json()["error"]["code"] == "INTERNAL"


# --- memory_recall -------------------------------------------------------------------------------


async def test_memory_recall_finds_user_and_agent_memories(rpc: Any) -> None:
    rpc.fake.seed_memory("User prefers Rust for backend services.")
    rpc.fake.seed_memory("The main agent deploys the backend with blue green.", peer="main")
    rpc.fake.seed_memory("Another agent's backend notes.", peer="other")
    r = await rpc.tool("memory_recall", call({"query": "backend rust deploys"}))
    text = text_of(r)
    assert text.startswith("Found 2 memories:")
    assert "User prefers Rust" in text and "blue green" in text and "Another agent" not in text
    # Directory hits (levels 0 and 1) never show.
    assert ".overview.md" not in text and ".abstract.md" not in text
    uris = [m["uri"] for m in r.json()["details"]["memories"]]
    assert len(uris) == len(set(uris)) == 2


async def test_memory_recall_resources_only_when_asked(rpc: Any) -> None:
    rpc.fake.seed_resource("Backend architecture document about rust.", uri="viking://resources/arch.md")
    without = text_of(await rpc.tool("memory_recall", call({"query": "backend architecture rust"})))
    assert "arch.md" not in without
    with_res = text_of(
        await rpc.tool("memory_recall", call({"query": "backend architecture rust", "includeResources": True}))
    )
    assert "viking://resources/arch.md" in with_res


async def test_memory_recall_nothing_found(rpc: Any) -> None:
    r = await rpc.tool("memory_recall", call({"query": "nothing stored yet", "scoreThreshold": 0.9}))
    assert text_of(r) == "No relevant OpenViking memories found."
    assert r.json()["details"]["count"] == 0


# --- memory_store ------------------------------------------------------------------------------------


async def test_memory_store_uses_a_temporary_session(rpc: Any, commit_worker: None) -> None:
    await rpc.ov.add_messages(SID, [{"role": "user", "parts": [{"type": "text", "text": "ongoing chat"}]}])
    r = await rpc.tool("memory_store", call({"text": "I prefer dark roast coffee"}))
    details = r.json()["details"]
    assert details["action"] == "stored" and details["usedTempSession"] is True
    assert details["sessionId"].startswith("memory-store-") and details["sessionId"] != SID
    assert details["memoriesCount"] >= 1
    assert "memories extracted" in text_of(r)
    assert [m["parts"][0]["text"] for m in rpc.fake.sessions[SID].messages] == ["ongoing chat"]
    assert any("dark roast" in e.content for e in rpc.fake.memories())


async def test_memory_store_into_a_given_session(rpc: Any, commit_worker: None) -> None:
    r = await rpc.tool("memory_store", call({"text": "remember the release is on friday", "sessionId": "notes-1"}))
    details = r.json()["details"]
    assert details["sessionId"] == "notes-1" and details["usedTempSession"] is False
    assert rpc.fake.sessions["notes-1"].archives  # committed


async def test_memory_store_failed_extraction_is_reported(rpc: Any, commit_worker: None) -> None:
    rpc.fake.phase2 = "fail"
    r = await rpc.tool("memory_store", call({"text": "I prefer tea"}))
    assert r.json()["details"]["action"] == "failed"
    assert "failed" in text_of(r)


# --- memory_forget -------------------------------------------------------------------------------------


async def test_forget_by_uri(rpc: Any) -> None:
    uri = rpc.fake.seed_memory("User likes jazz.")
    r = await rpc.tool("memory_forget", call({"uri": uri}))
    assert r.json()["details"] == {"action": "deleted", "uri": uri, "deleted": 1}
    assert rpc.fake.memories() == []


async def test_forget_reports_what_ov_removed_not_a_guess(rpc: Any) -> None:
    r = await rpc.tool("memory_forget", call({"uri": "viking://~/memories/never-stored.md"}))
    details = r.json()["details"]
    assert details["action"] == "not_found" and details["deleted"] == 0
    assert "Forgotten" not in text_of(r)


async def test_forget_sends_the_canonical_uri(rpc: Any) -> None:
    uri = rpc.fake.seed_memory("User likes jazz.")
    folder, name = uri.rsplit("/", 1)
    spelled = f"{folder}/x/%2e%2E/.//{name.replace('.', '%2e')}"
    r = await rpc.tool("memory_forget", call({"uri": spelled}))
    assert r.json()["details"]["action"] == "deleted"
    assert r.json()["details"]["uri"] == uri
    assert rpc.fake.memories() == []


@pytest.mark.parametrize(
    "uri",
    [
        "viking://~/memories/../../resources/x",
        "viking://~/memories/../resources.md",
        "viking://agent/memories/../..",
        "viking://~/memories/%2e%2e/%2e%2e/%2e%2e/resources/doc.md",
        "viking://~/memories/%252e%252e/%252e%252e/resources/doc.md",
        "viking://~/memories/%252525252e%252525252e/x",
        "viking://~/memories/..%2f..%2fresources%2fdoc.md",
        "viking://~/memories/..\\..\\resources",
        "viking://~/memories/%ff",
        "viking://user/someone-else/memories/mem_1.md",
        "viking://~/memories%2f..%2f..%2fresources",
    ],
)
async def test_forget_refuses_what_is_not_the_callers_memory(rpc: Any, uri: str) -> None:
    rpc.fake.seed_resource("doc", uri="viking://resources/doc.md")
    r = await rpc.tool("memory_forget", call({"uri": uri}))
    if r.status_code == 422:
        assert r.json()["error"]["field"] == "params.uri" and r.json()["error"]["message"]
    else:
        assert r.status_code == 200 and r.json()["details"]["action"] == "rejected", r.text
    assert not any(m == "DELETE" for m, _ in rpc.fake.calls)


async def test_forget_refuses_a_non_memory_uri(rpc: Any) -> None:
    rpc.fake.seed_resource("doc", uri="viking://resources/doc.md")
    r = await rpc.tool("memory_forget", call({"uri": "viking://resources/doc.md"}))
    assert r.json()["details"]["action"] == "rejected"
    assert not any(m == "DELETE" for m, _ in rpc.fake.calls)


async def test_forget_by_query_deletes_one_confident_match(rpc: Any) -> None:
    uri = rpc.fake.seed_memory("User likes jazz music")
    rpc.fake.seed_memory("Completely unrelated fact about gardening")
    r = await rpc.tool("memory_forget", call({"query": "user likes jazz music", "scoreThreshold": 0.6}))
    assert r.json()["details"]["action"] == "deleted" and r.json()["details"]["uri"] == uri
    assert [e.uri for e in rpc.fake.memories()] != [uri] and len(rpc.fake.memories()) == 1


async def test_forget_by_query_lists_candidates_when_unsure(rpc: Any) -> None:
    rpc.fake.seed_memory("User likes jazz music")
    rpc.fake.seed_memory("User likes jazz concerts")
    r = await rpc.tool("memory_forget", call({"query": "user likes jazz"}))
    details = r.json()["details"]
    assert details["action"] == "candidates" and len(details["candidates"]) == 2
    assert "%)" in text_of(r)
    assert len(rpc.fake.memories()) == 2  # nothing deleted


async def test_forget_by_query_lists_two_events_in_the_same_words(rpc: Any) -> None:
    """Two events reading alike are two memories: listed as candidates, neither deleted."""
    first = rpc.fake.seed_memory("Met Bob at the cafe", category="events")
    second = rpc.fake.seed_memory("Met Bob at the cafe", category="events")
    r = await rpc.tool("memory_forget", call({"query": "Met Bob at the cafe", "scoreThreshold": 0.6}))
    details = r.json()["details"]
    assert details["action"] == "candidates", details
    assert sorted(c["uri"] for c in details["candidates"]) == sorted([first, second])
    assert len(rpc.fake.memories()) == 2  # nothing deleted


async def test_forget_by_query_without_match(rpc: Any) -> None:
    r = await rpc.tool("memory_forget", call({"query": "something never stored", "scoreThreshold": 0.9}))
    assert r.json()["details"]["action"] == "none"


# --- memory_search, add_resource, add_skill ----------------------------------------------------------------


async def test_memory_search_covers_resources_and_skills(rpc: Any) -> None:
    rpc.fake.seed_resource("Deploy guide for the backend", uri="viking://resources/deploy.md")
    await rpc.tool("add_skill", call({"content": "---\nname: deployer\ndescription: deploys the backend\n---\nSteps"}))
    r = await rpc.tool("memory_search", call({"query": "deploy backend"}))
    text = text_of(r)
    assert "viking://resources/deploy.md" in text and "viking://agent/skills/deployer" in text
    types = {row["type"] for row in r.json()["details"]["results"]}
    assert {"resource", "skill"} <= types


async def test_add_resource_from_content(rpc: Any) -> None:
    r = await rpc.tool("add_resource", call({"content": "# Notes\nhello", "filename": "notes.md", "reason": "test"}))
    details = r.json()["details"]
    assert details["action"] == "resource_imported" and details["root_uri"] == "viking://resources/notes"
    assert any(path.endswith("/temp_upload") for _, path in rpc.fake.calls)


SKILL_MD = "---\nname: indenter\ndescription: keeps indentation\n---\n\n    indented code\n\tand a tab\n\n"
YAML = "  key:\n    - nested: value\n  other: 1\n\n"


async def test_tool_parameters_reach_ov_byte_for_byte(rpc: Any) -> None:
    skill = await rpc.tool("add_skill", call({"content": SKILL_MD}))
    assert rpc.fake.entries["default"][skill.json()["details"]["uri"]].content == SKILL_MD
    resource = await rpc.tool("add_resource", call({"content": YAML, "filename": "conf.yaml"}))
    assert rpc.fake.entries["default"][resource.json()["details"]["root_uri"]].content == YAML


@pytest.mark.parametrize(
    ("tool", "params", "field"),
    [
        ("memory_recall", {"query": "   "}, "params.query"),
        ("memory_store", {"text": "\n\t "}, "params.text"),
        ("add_skill", {"content": "  \n"}, "params.content"),
    ],
)
async def test_blank_text_is_refused_without_being_changed(rpc: Any, tool: str, params: dict, field: str) -> None:
    r = await rpc.tool(tool, call(params))
    assert r.status_code == 422 and r.json()["error"]["field"] == field


async def test_add_resource_from_a_local_file(rpc: Any, tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text("# Guide\nstep one", encoding="utf-8")
    r = await rpc.tool("add_resource", call({"path": str(doc)}))
    assert r.json()["details"]["root_uri"] == "viking://resources/guide"
    assert "step one" in rpc.fake.entries["default"]["viking://resources/guide"].content


async def test_add_resource_from_a_url_is_passed_to_ov(rpc: Any) -> None:
    r = await rpc.tool("add_resource", call({"path": "https://example.com/docs/intro.md"}))
    assert r.json()["details"]["source_path"] == "https://example.com/docs/intro.md"
    assert not any(path.endswith("/temp_upload") for _, path in rpc.fake.calls)


@pytest.mark.parametrize(
    ("make_path", "code"),
    [
        (lambda tmp: tmp / "missing.md", "path_not_found"),
        (lambda tmp: tmp, "not_a_file"),
        (lambda tmp: f"{tmp}/a\x00b.md", "invalid_path"),
    ],
)
async def test_add_resource_bad_local_path_is_400(rpc: Any, tmp_path: Path, make_path: Any, code: str) -> None:
    r = await rpc.tool("add_resource", call({"path": str(make_path(tmp_path))}))
    assert r.status_code == 400 and r.json()["error"]["code"] == code
    assert rpc.fake.calls == []


async def test_add_skill_from_a_directory(rpc: Any, tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_text("---\nname: greeter\ndescription: says hi\n---\nSay hi.", encoding="utf-8")
    r = await rpc.tool("add_skill", call({"path": str(tmp_path)}))
    assert r.json()["details"]["uri"] == "viking://agent/skills/greeter"
    assert "greeter" in text_of(r)


# --- archives -------------------------------------------------------------------------------------------


async def archived_session(rpc: Any) -> None:
    await rpc.ov.add_messages(
        SID,
        [
            {"role": "user", "parts": [{"type": "text", "text": "the router password is hunter2"}]},
            {"role": "assistant", "parts": [{"type": "text", "text": "noted (a.b) [c]"}]},
        ],
    )
    await rpc.ov.commit(SID, keep_recent_count=0, enable_working_memory=True)
    rpc.fake.run_phase2()


async def test_archive_search_greps_the_archives_literally(rpc: Any) -> None:
    await archived_session(rpc)
    text = text_of(await rpc.tool("ov_archive_search", call({"query": "ROUTER password"})))
    assert text.startswith('Found 1 match(es) for "ROUTER password"')
    assert "## Match 1: archive_001" in text and "hunter2" in text
    # Regex characters are searched as themselves.
    literal = text_of(await rpc.tool("ov_archive_search", call({"query": "(a.b) [c]"})))
    assert literal.startswith("Found 1 match")
    grep = next(r for r in rpc.fake.requests if r.url.path.endswith("/search/grep"))
    assert f"viking://~/sessions/{SID}/history".encode() in grep.read()


async def test_archive_search_without_archives_finds_nothing(rpc: Any) -> None:
    r = await rpc.tool("ov_archive_search", call({"query": "anything"}))
    assert r.json()["details"]["matchCount"] == 0


async def test_archive_tools_need_a_session(rpc: Any) -> None:
    r = await rpc.tool("ov_archive_search", {"params": {"query": "x"}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_session"


async def test_archive_expand_lists_the_messages(rpc: Any) -> None:
    await archived_session(rpc)
    r = await rpc.tool("ov_archive_expand", call({"archiveId": "archive_001"}))
    text = text_of(r)
    assert text.startswith("## archive_001")
    assert "[user]:\nthe router password is hunter2" in text
    assert r.json()["details"]["messageCount"] == 2


async def test_archive_expand_unknown_archive_is_404(rpc: Any) -> None:
    await archived_session(rpc)
    r = await rpc.tool("ov_archive_expand", call({"archiveId": "archive_009"}))
    assert r.status_code == 404 and r.json()["error"]["field"] == "params.archiveId"
