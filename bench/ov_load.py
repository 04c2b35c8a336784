"""OV's load per turn, on the real openviking-server 0.5.2: ovstream against the reference
plugin's pattern on the same conversations, side by side in one run. Prints figures; not a test.

Live traffic: each turn is its own commitTurn event of 2-4 messages (a user message, an
assistant answer, every third turn a tool call and its result), followed by assembles as
the 2026.9 host calls it: two per turn, three on every fifth (2.2 on average), each a main
call carrying the transcript.

- **ovstream**: the event goes onto Redis; a capture worker (in this process) writes it with
  one batch call and refreshes the session's snapshot; the assembles are answered from
  the snapshot (the app in this process, as ``ovstream rpc`` serves it).
- **reference**: one ``add_message`` per message, a session read per turn, and ``/context``
  per assemble (what the reference plugin does).

Counted per turn: OV requests (every request this process sent to OV) and OV CPU seconds
(utime + stime of the openviking-server process group, from /proc). Commits are left out
of both (threshold far away): they cost OV the same either way.

    .venv/bin/python bench/ov_load.py [--sessions 4] [--turns 15]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import redis
import redis.asyncio
import uvloop
from processes import group_cpu_seconds  # bench/processes.py

from core.config import Settings
from core.events import TurnEvent
from core.ov.client import OVClient
from core.ov.messages import text_message
from workers.capture.worker import CaptureWorker
from workers.dev.local_ov import find_openviking_server, start_local_ov
from workers.dev.local_redis import free_port, start_redis_server
from workers.dev.model_server import start_model_server
from workers.rpc.app import create_app
from workers.status import read_backlog
from workers.store.streams import publish_turn

ASSEMBLES_PER_TURN = 2.2


def turn_messages(session: str, index: int) -> list[dict[str, Any]]:
    words = " ".join(f"w{(index * 7 + j) % 50}" for j in range(30))
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{session} question {index}: {words}"}]
    if index % 3 == 2:  # a tool call and its result
        call = f"call_{session}_{index}"
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "id": call, "name": "read", "arguments": {"p": "x"}}],
            }
        )
        messages.append(
            {"role": "toolResult", "toolCallId": call, "toolName": "read", "content": [{"type": "text", "text": words}]}
        )
    messages.append({"role": "assistant", "content": [{"type": "text", "text": f"{session} answer {index}: {words}"}]})
    return messages


class Counting(httpx.AsyncHTTPTransport):
    """The transport of every OV client here: counts the requests."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return await super().handle_async_request(request)


def assembles(turns: int) -> list[int]:
    """How many assembles follow each turn: 2 or 3, averaging ASSEMBLES_PER_TURN."""
    return [3 if i % 5 == 0 else 2 for i in range(turns)]


async def ovstream_pattern(settings: Settings, sessions: list[str], turns: int, counting: Counting) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    worker = CaptureWorker(settings, ov_transport=counting)
    app = create_app(settings, ov_transport=counting)
    task = asyncio.create_task(worker.run())
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://rpc")
    try:
        transcripts: dict[str, list[dict[str, Any]]] = {s: [] for s in sessions}
        for i, extra in zip(range(turns), assembles(turns)):
            for session in sessions:
                messages = turn_messages(session, i)
                transcripts[session] += messages
                event = TurnEvent(
                    event_id=uuid.uuid4().hex,
                    session_id=session,
                    messages=messages,
                    advancement_key=f"{session}:{i}",
                    published_at=time.time(),
                )
                publish_turn(client, settings, event)
            while any(s.oldest_unapplied is not None for s in read_backlog(client, settings)):
                await asyncio.sleep(0.005)
            for session in sessions:
                body = {"sessionId": session, "messages": transcripts[session], "prompt": "next"}
                for _ in range(extra):
                    (await http.post("/v1/assemble", json=body)).raise_for_status()
    finally:
        worker.stop()
        await task
        await http.aclose()
        client.close()


async def reference_pattern(base_url: str, sessions: list[str], turns: int, counting: Counting) -> None:
    ov = OVClient(base_url, transport=counting, retries=0)
    try:
        for i, extra in zip(range(turns), assembles(turns)):
            for session in sessions:
                for message in turn_messages(session, i):
                    text = message["content"] if isinstance(message["content"], str) else str(message["content"])
                    role = "user" if message["role"] == "user" else "assistant"
                    await ov.add_message(session, text_message(role, text))
                await ov.get_session(session)
                for _ in range(extra):
                    await ov.get_context(session, token_budget=128_000)
    finally:
        await ov.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=15)
    args = parser.parse_args()
    binary = find_openviking_server()
    if binary is None:
        raise SystemExit("openviking-server not found (scripts/bootstrap.sh openviking)")
    workdir = tempfile.mkdtemp(prefix="ovstream-ov-load-")
    model = start_model_server("127.0.0.1", 0)
    redis_server = start_redis_server()
    ov = start_local_ov(workdir, port=free_port(), model_url=model.url, binary=binary)
    try:
        turns = args.turns * args.sessions
        results: dict[str, tuple[float, float]] = {}
        for name in ("reference", "ovstream"):
            sessions = [f"{name}-{uuid.uuid4().hex[:6]}-{s}" for s in range(args.sessions)]
            counting = Counting()
            cpu_before = group_cpu_seconds(ov.pid)
            if name == "ovstream":
                settings = Settings(
                    redis_url=redis_server.url,
                    base_url=ov.url,
                    key_prefix=f"ovload{uuid.uuid4().hex[:6]}",
                    capture_block_ms=5,
                    commit_token_threshold=10_000_000,
                )
                uvloop.run(ovstream_pattern(settings, sessions, args.turns, counting))
            else:
                uvloop.run(reference_pattern(ov.url, sessions, args.turns, counting))
            time.sleep(0.5)  # let OV finish what the last requests started (its indexing)
            results[name] = (counting.requests / turns, (group_cpu_seconds(ov.pid) - cpu_before) / turns)
        print(
            f"OV load per turn: {args.sessions} sessions x {args.turns} turns, 2-4 messages a turn,"
            f" {ASSEMBLES_PER_TURN} assembles a turn, real openviking-server 0.5.2"
        )
        print(f"{'pattern':<10} {'OV requests':>12} {'OV CPU ms':>10}")
        for name, (reqs, cpu) in results.items():
            print(f"{name:<10} {reqs:>12.2f} {cpu * 1000:>10.1f}")
        ref, ours = results["reference"], results["ovstream"]
        print(f"ovstream / reference: requests {ours[0] / ref[0]:.2f}x, OV CPU {ours[1] / ref[1]:.2f}x")
    finally:
        ov.stop()
        redis_server.stop()
        model.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
