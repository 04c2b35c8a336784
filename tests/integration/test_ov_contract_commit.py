"""The OV 0.5.2 contract, commit and phase 2, against the real openviking-server."""

from __future__ import annotations

import httpx

from core.messages.tokens import estimate_tokens
from tests.helpers.ov_http import BUDGET, commit_and_wait, ok, sid, text_msg
from tests.helpers.waiting import wait_until

# --- commit and phase 2 -------------------------------------------------------------------


def test_commit_of_empty_session_is_skipped(ov_http: httpx.Client) -> None:
    s = sid("empty")
    ok(ov_http.post("/api/v1/sessions", json={"session_id": s}))
    r = ok(ov_http.post(f"/api/v1/sessions/{s}/commit", json={}))
    assert r["status"] == "skipped" and r["task_id"] is None and r["archived"] is False
    assert r["reason"] == "no_messages"


def test_commit_with_working_memory_extracts_preference(ov_http: httpx.Client, wait_task) -> None:
    s = sid("phase2")
    ok(
        ov_http.post(
            f"/api/v1/sessions/{s}/messages/batch",
            json={
                "messages": [
                    text_msg("user", "I prefer green tea with jasmine flowers."),
                    text_msg("assistant", "Noted: jasmine green tea."),
                ]
            },
        )
    )
    accepted, task = commit_and_wait(ov_http, wait_task, s, enable_working_memory=True)
    assert accepted["archive_uri"] == f"viking://user/default/sessions/{s}/history/archive_001"
    assert accepted["archived"] is True and accepted["effective_enable_working_memory"] is True
    assert task["status"] == "completed", task
    assert task["task_type"] == "session_commit" and task["resource_id"] == s
    result = task["result"]
    assert result["archive_uri"] == accepted["archive_uri"]
    assert result["memories_extracted"] == {"memory_write": 1}

    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    assert ctx["latest_archive_overview"].startswith("# Working Memory")
    assert "green tea" in ctx["latest_archive_overview"]
    assert ctx["messages"] == []
    assert ctx["stats"]["totalArchives"] == 1 and ctx["stats"]["failedArchives"] == 0
    assert ctx["estimatedTokens"] == ctx["stats"]["activeTokens"] + ctx["stats"]["archiveTokens"]

    archive = ok(ov_http.get(f"/api/v1/sessions/{s}/archives/archive_001"))
    assert archive["archive_id"] == "archive_001"
    assert archive["overview"] == ctx["latest_archive_overview"]
    assert [m["parts"][0]["text"] for m in archive["messages"]] == [
        "I prefer green tea with jasmine flowers.",
        "Noted: jasmine green tea.",
    ]

    state = ok(ov_http.get(f"/api/v1/sessions/{s}"))
    assert (state["message_count"], state["commit_count"], state["pending_tokens"]) == (0, 1, 0)

    expected_uri = "viking://user/default/memories/preferences/default/green_tea_jasmine.md"
    for target in ("viking://user/default/memories", "viking://~/memories"):
        # OV indexes a new memory a moment after its task reports completed, and other
        # modules' memories share this OV user: wait until ours is among the leaves.
        def with_ours(target: str = target) -> tuple[dict, list[dict]] | None:
            found = ok(
                ov_http.post(
                    "/api/v1/search/find", json={"query": "green tea jasmine", "target_uri": target, "limit": 10}
                )
            )
            leaves = [h for h in found["memories"] if h["level"] == 2]
            return (found, leaves) if expected_uri in [h["uri"] for h in leaves] else None

        found, leaves = wait_until(with_ours, f"{expected_uri} under {target}", timeout_s=30, interval_s=0.25)
        assert [h["uri"] for h in leaves][:1] == [expected_uri], found
        assert "green tea" in leaves[0]["abstract"] and leaves[0]["context_type"] == "memory"
    body = ok(ov_http.get("/api/v1/content/read", params={"uri": expected_uri}))
    assert "I prefer green tea with jasmine flowers." in body


def test_second_commit_updates_working_memory_and_existing_preference(ov_http: httpx.Client, wait_task) -> None:
    s = sid("phase2b")
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "I like mountain biking trails.")))
    _, first = commit_and_wait(ov_http, wait_task, s, enable_working_memory=True)
    assert first["status"] == "completed", first
    ok(
        ov_http.post(
            f"/api/v1/sessions/{s}/messages",
            json=text_msg("user", "I like mountain biking trails at dawn. I love sourdough bread."),
        )
    )
    accepted, second = commit_and_wait(ov_http, wait_task, s, enable_working_memory=True)
    assert accepted["archive_uri"].endswith("/history/archive_002")
    assert second["status"] == "completed", second
    # the biking topic already existed -> an edit; sourdough is new -> a write
    assert second["result"]["memories_extracted"] == {"memory_write": 1, "memory_edit": 1}
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    overview = ctx["latest_archive_overview"]
    assert "mountain biking" in overview and "sourdough" in overview
    assert ctx["stats"]["totalArchives"] == 2
    state = ok(ov_http.get(f"/api/v1/sessions/{s}"))
    assert state["commit_count"] == 2 and state["memories_extracted"]["total"] == 3


def test_commit_without_working_memory_has_no_overview(ov_http: httpx.Client, wait_task) -> None:
    s = sid("nowm")
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "Nothing memorable here.")))
    accepted, task = commit_and_wait(ov_http, wait_task, s)
    assert accepted["effective_enable_working_memory"] is False
    assert task["status"] == "completed", task
    assert task["result"]["memories_extracted"] == {}
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    assert ctx["latest_archive_overview"] == ""
    assert ctx["stats"]["totalArchives"] == 1


def test_keep_recent_count_keeps_the_tail_active(ov_http: httpx.Client, wait_task) -> None:
    s = sid("keep")
    texts = [f"turn {i} says something" for i in range(5)]
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages/batch", json={"messages": [text_msg("user", t) for t in texts]}))
    accepted = ok(ov_http.post(f"/api/v1/sessions/{s}/commit", json={"keep_recent_count": 2}))
    # phase 1 (archiving) is done when commit answers. pending_tokens counts only the
    # messages OUTSIDE the last commit's keep_recent_count window (what the next
    # commit would archive), so the kept tail counts 0
    state = ok(ov_http.get(f"/api/v1/sessions/{s}"))
    assert state["message_count"] == 2 and state["keep_recent_count"] == 2
    assert state["pending_tokens"] == 0
    assert wait_task(ov_http, accepted["task_id"])["status"] == "completed"
    later = ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "one more turn")))
    assert later["message_count"] == 3
    assert later["pending_tokens"] == estimate_tokens(texts[3])  # the one now outside the window
    again = ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "and another")))
    assert again["pending_tokens"] == estimate_tokens(texts[3]) + estimate_tokens(texts[4])
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    active = [*texts[-2:], "one more turn", "and another"]
    assert [m["parts"][0]["text"] for m in ctx["messages"]] == active
    assert ctx["stats"]["activeTokens"] == sum(estimate_tokens(t) for t in active)


def test_phase2_failure_is_counted_and_later_commits_work(
    ov_http: httpx.Client, wait_task, model_mode, model_server
) -> None:
    s = sid("fail")
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "I prefer loud heavy metal.")))
    model_mode("garbage")
    before = model_server.counts().get("garbage", 0)
    _, task = commit_and_wait(ov_http, wait_task, s, enable_working_memory=True)
    assert model_server.counts().get("garbage", 0) > before
    assert task["status"] == "failed", task
    assert task["result"] is None and "could not be parsed" in task["error"]
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    assert ctx["stats"]["failedArchives"] == 1 and ctx["stats"]["totalArchives"] == 1
    assert ctx["messages"] == [] and ctx["latest_archive_overview"] == ""

    model_mode("normal")
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "I prefer quiet jazz.")))
    accepted, again = commit_and_wait(ov_http, wait_task, s, enable_working_memory=True)
    assert accepted["archive_uri"].endswith("/history/archive_002")
    assert again["status"] == "completed", again
    # failedArchives is 0/1 ("the newest finished archive failed"), so a later success
    # resets it; the failed archive's messages are not re-processed: they are lost
    assert again["result"]["memories_extracted"] == {"memory_write": 1}
    ctx = ok(ov_http.get(f"/api/v1/sessions/{s}/context", params=BUDGET))
    assert ctx["stats"]["failedArchives"] == 0 and ctx["stats"]["totalArchives"] == 2
    assert "quiet jazz" in ctx["latest_archive_overview"]
    assert "heavy metal" not in ctx["latest_archive_overview"]
    found = ok(
        ov_http.post(
            "/api/v1/search/find", json={"query": "loud heavy metal", "target_uri": "viking://~/memories", "limit": 10}
        )
    )
    assert not [h for h in found["memories"] if h["uri"].endswith("/loud_heavy_metal.md")]


def test_grep_finds_archived_text(ov_http: httpx.Client, wait_task) -> None:
    s = sid("grep")
    ok(ov_http.post(f"/api/v1/sessions/{s}/messages", json=text_msg("user", "The Zanzibar protocol.")))
    _, task = commit_and_wait(ov_http, wait_task, s)
    assert task["status"] == "completed"
    found = ok(
        ov_http.post(
            "/api/v1/search/grep",
            json={"uri": f"viking://~/sessions/{s}/history", "pattern": "zanzibar", "case_insensitive": True},
        )
    )
    assert found["count"] == 1
    assert found["matches"][0]["uri"] == f"viking://user/default/sessions/{s}/history/archive_001/messages.jsonl"
    assert "Zanzibar" in found["matches"][0]["content"]
