"""Capture grows a session's snapshot by what it wrote instead of reading OV /context back,
and the result is what /context returns: on the real openviking-server 0.5.2, turn by turn
(text, tool calls with results, an archive made by a commit in between; the first round of a
session new to OV included), the assemble base
built from the grown snapshot equals the one built from a fresh /context read."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import redis

from core.assemble_plan import build_session_base, snapshot_base
from core.config import Settings
from core.events import TurnEvent
from core.ov.client import OVClient
from core.session import SessionAddress
from tests.helpers.capture import stored_snapshot
from workers.capture.worker import CaptureWorker
from workers.store.streams import publish_turn


class Counting(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.context_reads = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/context"):
            self.context_reads += 1
        return await super().handle_async_request(request)


def _turn(session: str, index: int) -> list[dict[str, Any]]:
    user = {"role": "user", "content": f"question {index} about the deploy pipeline, step {index * 3}"}
    if index % 2 == 1:
        call = f"call_{index}"
        return [
            user,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"let me look at step {index}"},
                    {"type": "toolCall", "id": call, "name": "read_file", "arguments": {"path": f"ci/{index}.yml"}},
                ],
            },
            {
                "role": "toolResult",
                "toolCallId": call,
                "toolName": "read_file",
                "content": [{"type": "text", "text": f"stage: build-{index}\nrun: make {index}"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": f"step {index} runs make {index}"}]},
        ]
    return [user, {"role": "assistant", "content": [{"type": "text", "text": f"answer {index}: it deploys"}]}]


async def _round(settings: Settings, transport: Counting, client: redis.Redis, session: str, index: int) -> None:
    event = TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=_turn(session, index),
        advancement_key=f"{session}:{index}",
        published_at=time.time(),
    )
    publish_turn(client, settings, event)
    await CaptureWorker(settings, ov_transport=transport, burst=True).run()


async def _fresh_base(ov: OVClient, session: str) -> Any:
    ctx = await ov.get_context(session, token_budget=128_000)
    return build_session_base(
        ctx.latest_archive_overview, ctx.pre_archive_abstracts, ctx.messages, ctx.stats.total_archives
    )


def test_a_grown_snapshot_is_what_ov_context_returns(redis_url: str, ov_server: Any) -> None:
    settings = Settings(
        redis_url=redis_url,
        base_url=ov_server.url,
        key_prefix=f"grow{uuid.uuid4().hex[:6]}",
        capture_block_ms=20,
        commit_token_threshold=10_000_000,
    )
    session = f"grow-{uuid.uuid4().hex[:8]}"
    address = SessionAddress(session, "main", None)
    client = redis.Redis.from_url(redis_url)
    transport = Counting()

    async def scenario() -> None:
        ov = OVClient(ov_server.url)
        try:
            for index in range(8):
                if index == 5:  # an archive in between: OV's count drops, the next round reads /context
                    accepted = await ov.commit(session, keep_recent_count=2)
                    if accepted.task_id:
                        for _ in range(600):
                            task = await ov.get_task(accepted.task_id)
                            if task.status in ("completed", "failed"):
                                break
                            await asyncio.sleep(0.1)
                await _round(settings, transport, client, session, index)
                snapshot = stored_snapshot(client, settings, address)
                assert snapshot is not None
                grown, fresh = snapshot_base(snapshot), await _fresh_base(ov, session)
                assert grown == fresh, f"turn {index}: the snapshot differs from OV /context"
        finally:
            await ov.aclose()

    asyncio.run(scenario())
    client.close()
    # 8 rounds: only the one after the commit read /context; the first (a session new to OV) and
    # the rest were built from what capture wrote.
    assert transport.context_reads == 1, transport.context_reads
