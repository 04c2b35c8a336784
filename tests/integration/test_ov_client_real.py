"""core.ov.client.OVClient against the real openviking-server 0.5.2 (typed results, errors)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from core.messages.tokens import estimate_tokens
from core.ov.client import OVClient, OVError
from core.ov.models import TaskState
from tests.helpers.waiting import eventually


def sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def text_msg(role: str, text: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "text": text}]}


async def finished(ov: OVClient, task_id: str, *, tries: int = 600) -> TaskState:
    """Poll until terminal; ``tries`` only bounds a hung server."""
    for _ in range(tries):
        task = await ov.get_task(task_id)
        if task.status in ("completed", "failed", "cancelled"):
            return task
        await asyncio.sleep(0.25)
    raise AssertionError(f"task {task_id} never finished")


async def test_round_trip_with_typed_results(ov_server) -> None:
    s = sid("client")
    async with OVClient(ov_server.url, retries=0) as ov:
        assert (await ov.health())["version"] == "0.5.2"
        lines = [f"client line {i}" for i in range(150)]
        added = await ov.add_messages(s, [text_msg("user", t) for t in lines])  # 100 + 50
        assert added.added == 150 and added.message_count == 150
        state = await ov.get_session(s)
        assert state.pending_tokens == sum(estimate_tokens(t) for t in lines)
        accepted = await ov.commit(s, keep_recent_count=1, enable_working_memory=True)
        assert accepted.status == "accepted" and accepted.archive_uri.endswith("/history/archive_001")
        task = await finished(ov, accepted.task_id)
        assert task.status == "completed", task
        assert task.result["archive_uri"] == accepted.archive_uri
        ctx = await ov.get_context(s, token_budget=128_000)
        assert ctx.latest_archive_overview.startswith("# Working Memory")
        assert ctx.stats.total_archives == 1 and ctx.stats.failed_archives == 0
        assert [m.text for m in ctx.messages] == ["client line 149"]
        assert ctx.estimated_tokens == ctx.stats.active_tokens + ctx.stats.archive_tokens
        archive = await ov.get_archive(s, "archive_001")
        assert archive.archive_id == "archive_001" and len(archive.messages) == 149
        empty = sid("empty")
        with pytest.raises(OVError) as no_session:  # commit does not auto-create
            await ov.commit(empty)
        assert no_session.value.code == "NOT_FOUND"
        await ov.create_session(empty)
        skipped = await ov.commit(empty)
        assert skipped.status == "skipped" and skipped.task_id is None
        assert skipped.reason == "no_messages"


async def test_errors_map_to_ov_error(ov_server) -> None:
    s = sid("clienterr")
    async with OVClient(ov_server.url, retries=0) as ov:
        with pytest.raises(OVError) as missing:  # short envelope (no result key)
            await ov.get_session(s)
        assert (missing.value.code, missing.value.status) == ("NOT_FOUND", 404)
        await ov.create_session(s)
        with pytest.raises(OVError) as dup:  # full envelope with details
            await ov.create_session(s)
        assert (dup.value.code, dup.value.status) == ("ALREADY_EXISTS", 409)
        with pytest.raises(OVError) as no_archive:
            await ov.get_archive(s, "archive_009")
        assert no_archive.value.code == "NOT_FOUND"
        with pytest.raises(OVError) as no_task:
            await ov.get_task("no-such-task")
        assert (no_task.value.code, no_task.value.status) == ("NOT_FOUND", 404)


async def test_find_read_and_grep_shapes(ov_server) -> None:
    s = sid("clientfind")
    async with OVClient(ov_server.url, retries=0) as ov:
        await ov.add_message(s, text_msg("user", "I prefer vinyl records over streaming."))
        task = await finished(ov, (await ov.commit(s)).task_id)
        assert task.status == "completed", task

        # OV indexes a new memory shortly after its task reports completed: poll for it.
        # Other modules' memories share this OV user, so look for ours among the hits.
        async def vinyl_leaves() -> list:
            found = await ov.find("vinyl records", target_uri="viking://~/memories", limit=10)
            return [
                h
                for h in found.memories
                if h.level == 2 and h.uri.endswith("/preferences/default/vinyl_records_streaming.md")
            ]

        leaves = await eventually(vinyl_leaves, "the vinyl memory indexed", timeout_s=30, interval_s=0.25)
        assert "memory_type=preferences" in leaves[0].tags
        assert "vinyl" in await ov.read(leaves[0].uri)
        grep = await ov.grep(f"viking://~/sessions/{s}/history", "vinyl")
        # grep over history also matches the archive's memory_diff.json (it quotes the
        # extracted memory), not only messages.jsonl
        files = sorted({m.uri.rsplit("/", 1)[-1] for m in grep.matches})
        assert grep.count == len(grep.matches) and files == ["memory_diff.json", "messages.jsonl"]
