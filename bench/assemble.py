"""Assemble latency: from the Redis snapshot vs fetching OV /context every call.

Prints figures; not a test. Starts a redis-server on a free loopback port,
builds a 200-message session in the in-memory FakeOV (with a simulated OV
round trip, ``--ov-latency-ms``), and times the same main-call request two
ways, in one run, in process:

- snapshot: ovstream's path (snapshot in Redis, caches in process);
- direct: the reference plugin's path (OV /context fetched and converted on
  every call), served by the same app code with ``direct=True``;
- snapshot, 2026.9 plugin: ovstream's path as the 2026.9 host's plugin calls
  it: the user's question as ``prompt`` (its recall block kept for the turn,
  so one Redis GET), the session's two latest turns as ``recentTurns``
  (already in the snapshot), and the shard's stream holding
  ``overlay_stream_scan`` newer entries of other sessions (read every call).

Each way is timed three times: through httpx's ASGITransport (an HTTP client
included; httpx adds a few hundred microseconds per call of its own), straight
into the ASGI app (the server's whole stack, as uvicorn drives it), and by
calling the assemble function alone. It runs on uvloop, as ``ovstream rpc`` does.

    .venv/bin/python bench/assemble.py [--requests 2000] [--ov-latency-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import msgspec
import redis
import redis.asyncio
import uvloop

from core.config import Settings
from core.events import TurnEvent
from workers.dev.fake_ov.app import FakeOV
from workers.dev.local_redis import start_redis_server
from workers.rpc.app import create_app
from workers.rpc.assemble import assemble
from workers.rpc.context import resolve_caller
from workers.rpc.models import decode_assemble_request
from workers.rpc.responses import json_response
from workers.store.applied import CAPTURED_THROUGH, EVENT_IDS, LAST_ID
from workers.store.keys import Keys, scope_of, shard_of
from workers.store.streams import publish_turn

SESSION_ID = "bench-session"
AGENT = "main"


def transcript(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(OpenClaw messages, OV message bodies) of one conversation: alternating
    turns of a few hundred characters, every fifth assistant turn a tool call."""
    openclaw: list[dict[str, Any]] = []
    ov: list[dict[str, Any]] = []
    for i in range(count):
        words = " ".join(f"word{(i * 7 + j) % 97}" for j in range(40 + (i * 13) % 120))
        if i % 2 == 0:
            openclaw.append({"role": "user", "content": f"Question {i}: {words}", "timestamp": 1_760_000_000 + i})
            ov.append({"role": "user", "parts": [{"type": "text", "text": f"Question {i}: {words}"}]})
        elif i % 10 == 1:
            openclaw.append(
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"Answer {i}: {words}"}],
                    "stopReason": "stop",
                }
            )
            ov.append(
                {
                    "role": "assistant",
                    "peer_id": AGENT,
                    "parts": [
                        {"type": "text", "text": f"Answer {i}: {words}"},
                        {
                            "type": "tool",
                            "tool_id": f"call_{i}",
                            "tool_name": "read_file",
                            "tool_input": {"path": f"src/file_{i}.py"},
                            "tool_output": words[:400],
                            "tool_status": "completed",
                        },
                    ],
                }
            )
        else:
            openclaw.append(
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"Answer {i}: {words}"}],
                    "stopReason": "stop",
                }
            )
            ov.append(
                {"role": "assistant", "peer_id": AGENT, "parts": [{"type": "text", "text": f"Answer {i}: {words}"}]}
            )
    return openclaw, ov


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(n: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(min(50, n)):  # warm caches and connection pools
        await call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def asgi_call(app: Any, payload: bytes) -> None:
    """One POST /v1/assemble straight into the ASGI app, as uvicorn would pass it:
    the server's whole stack (routing, decoding, encoding) without an HTTP client."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/assemble",
        "raw_path": b"/v1/assemble",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    if status != 200:
        raise RuntimeError(f"assemble answered {status}")


async def run(args: argparse.Namespace) -> None:
    server = start_redis_server()
    url = server.url
    try:
        settings = Settings(redis_url=url, ov_backoff_s=0)
        rds = redis.Redis.from_url(url)
        fake = FakeOV()
        openclaw, ov_messages = transcript(args.messages)
        snapshot_app = create_app(
            settings, redis=redis.asyncio.Redis.from_url(url), commit_redis=rds, ov_transport=fake.transport()
        )
        direct_app = create_app(
            settings,
            redis=redis.asyncio.Redis.from_url(url),
            commit_redis=rds,
            ov_transport=fake.transport(),
            direct=True,
        )
        await snapshot_app.state.services.ov.add_messages(SESSION_ID, ov_messages)
        versions = snapshot_app.state.services.versions
        versions.start()  # as `ovstream rpc` does on startup: snapshot versions kept while tracked
        while not versions.live:
            await asyncio.sleep(0.01)
        # What capture records after applying the session's last turn.
        shard, scope = shard_of(SESSION_ID, settings.shards), scope_of(None, AGENT)
        recent = [
            TurnEvent(
                event_id=f"turn-{i}",
                session_id=SESSION_ID,
                messages=openclaw[i : i + 2],
                advancement_key=f"adv-{i}",
                published_at=1_760_000_000.0 + i,
            )
            for i in (len(openclaw) - 4, len(openclaw) - 2)
        ]
        rds.hset(
            Keys(settings.key_prefix).applied(shard, scope, SESSION_ID),
            mapping={
                LAST_ID: "1760000000000-0",
                CAPTURED_THROUGH: len(openclaw),
                EVENT_IDS: json.dumps([e.event_id for e in recent]),
            },
        )
        others = (f"other-{k}" for k in range(100_000))
        for i in range(settings.overlay_stream_scan):  # other sessions' turns on the same shard
            other = next(o for o in others if shard_of(o, settings.shards) == shard)
            publish_turn(
                rds,
                settings,
                TurnEvent(event_id=f"o{i}", session_id=other, messages=openclaw[:2], published_at=1_770_000_000.0 + i),
            )
        fake.latency_s = {"get_context": args.ov_latency_ms / 1000}

        body = {"sessionId": SESSION_ID, "messages": openclaw, "tokenBudget": 128_000, "prompt": "next"}
        plugin_body = {  # as the plugin sends it: its turns, the host's transcript counted
            **{k: v for k, v in body.items() if k != "messages"},
            "messageCount": len(openclaw),
            "prompt": "Which tea do I prefer in the morning?",
            "heldTurns": [],
            "recentTurns": [json.loads(msgspec.json.encode(e)) for e in recent],
        }
        results: dict[str, list[float]] = {}
        for name, app, sent in (
            ("snapshot", snapshot_app, body),
            ("direct", direct_app, body),
            ("2026.9 plugin", snapshot_app, plugin_body),
        ):
            request = decode_assemble_request(json.dumps(sent).encode())
            svc = app.state.services
            caller = resolve_caller(
                settings, session_id=SESSION_ID, session_key=None, runtime_context=None, api_key=None
            )
            first = msgspec.json.decode(json_response(await assemble(svc, request, caller)).body)
            assert len(first["messages"]) >= args.messages // 2, "assemble did not use the session"
            # The body is encoded once: a client's own JSON encoding is not the server's latency.
            payload = json.dumps(sent).encode()
            headers = {"content-type": "application/json"}
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://bench") as c:

                async def over_http() -> None:
                    r = await c.post("/v1/assemble", content=payload, headers=headers)
                    r.raise_for_status()

                results[f"{name} via HTTP (ASGI)"] = await timed(args.requests, over_http)
            results[f"{name} ASGI app (server)"] = await timed(args.requests, lambda: asgi_call(app, payload))
            results[f"{name} handler only"] = await timed(args.requests, lambda: assemble(svc, request, caller))

        print(
            f"assemble main call, {args.messages}-message session "
            f"({len(openclaw)} OpenClaw messages in, {len(first['messages'])} out), "
            f"{args.requests} requests each, in process, redis-server {url}"
        )
        print(
            f"direct path = OV /context on every call with a simulated OV latency of "
            f"{args.ov_latency_ms:g} ms (--ov-latency-ms)\n"
        )
        print(f"{'path':32} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
        for name, samples in results.items():
            print(
                f"{name:32} {statistics.median(samples):9.3f} {percentile(samples, 0.99):9.3f} "
                f"{statistics.fmean(samples):9.3f}"
            )
        for mode in ("via HTTP (ASGI)", "ASGI app (server)", "handler only"):
            snap, direct = results[f"snapshot {mode}"], results[f"direct {mode}"]
            plugin = results[f"2026.9 plugin {mode}"]
            print(
                f"\nspeed-up {mode}: p50 {statistics.median(direct) / statistics.median(snap):.1f}x, "
                f"p99 {percentile(direct, 0.99) / percentile(snap, 0.99):.1f}x; "
                f"2026.9 plugin vs direct p50 {statistics.median(direct) / statistics.median(plugin):.1f}x, "
                f"vs snapshot p50 {statistics.median(plugin) / statistics.median(snap):.2f} times the time"
            )
        await versions.stop()
        for app in (snapshot_app, direct_app):
            await app.state.services.ov.aclose()
        rds.close()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument(
        "--ov-latency-ms",
        type=float,
        default=2.0,
        help="simulated OV round trip added to each /context read (default 2)",
    )
    uvloop.run(run(parser.parse_args()))  # the RPC's event loop in production (workers.rpc.serve.cli_rpc)


if __name__ == "__main__":
    main()
