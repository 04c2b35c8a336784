"""Subagents at scale: trees of one parent spawning children at once. Prints figures; not a test.

Each tree: a parent with a ``--parent-turns``-turn conversation in OV, captured, its snapshot
stored by its own first assemble; it spawns ``--children`` children at once
(``POST /v1/subagents/prepare``, ``context: "fork"``), and every child takes ``--child-turns``
turns, each one main assemble as the plugin sends a fork's (its transcript: the parent's copy,
the spawning turn, its own turns so far; ``forked``). The children of a tree assemble
concurrently; ``--trees`` trees one after another. A redis-server on a free loopback port, the
RPC app in process over HTTP (ASGI), the in-memory fake OV (it counts the requests it gets).

Prints the children's assemble p50/p99 against the parents', and the OV requests per child
turn (the fork reads no OV /context: its base is the parent's snapshot and its own).

    .venv/bin/python bench/subagents.py [--trees 50] [--children 8] [--child-turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import redis

from core.config import Settings
from core.session import SessionAddress
from workers.dev.fake_ov.app import FakeOV
from workers.dev.local_redis import start_redis_server
from workers.rpc.app import create_app
from workers.store.applied import CAPTURED_THROUGH, LAST_ID
from workers.store.connection import connect_async
from workers.store.keys import Keys

WORDS = " ".join(f"word{i}" for i in range(60))


def host_turn(who: str, n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"{who} question {n}: {WORDS}"},
        {"role": "assistant", "content": [{"type": "text", "text": f"{who} answer {n}: {WORDS}"}]},
    ]


def ov_turn(who: str, n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "parts": [{"type": "text", "text": f"{who} question {n}: {WORDS}"}]},
        {"role": "assistant", "parts": [{"type": "text", "text": f"{who} answer {n}: {WORDS}"}]},
    ]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(client: httpx.AsyncClient, body: dict[str, Any], into: list[float]) -> None:
    started = time.perf_counter()
    answer = await client.post("/v1/assemble", json=body)
    into.append((time.perf_counter() - started) * 1000)
    answer.raise_for_status()


async def tree(
    client: httpx.AsyncClient, app: Any, settings: Settings, t: int, args: argparse.Namespace, timings: dict[str, Any]
) -> None:
    parent = f"00000000-0000-4000-8000-{t:012d}"
    parent_key = f"agent:main:tree{t}"
    turns = [m for n in range(args.parent_turns) for m in host_turn("parent", n)]
    ov_messages = [m for n in range(args.parent_turns) for m in ov_turn("parent", n)]
    await app.state.services.ov.add_messages(parent, ov_messages)
    applied = Keys(settings.key_prefix).session(SessionAddress(parent, "main", None), settings.shards).applied
    await app.state.services.redis.hset(applied, mapping={LAST_ID: "1760000000000-0", CAPTURED_THROUGH: len(turns)})
    parent_body = {"sessionId": parent, "sessionKey": parent_key, "messages": turns, "prompt": "next"}
    await timed(client, parent_body, timings["parent"])  # stores the parent's snapshot
    await timed(client, parent_body, timings["parent"])
    copy = [*turns, *host_turn("spawning", 0)]
    children = [(f"{t:08d}-0000-4000-8000-{c:012d}", f"agent:main:subagent:t{t}c{c}") for c in range(args.children)]
    await asyncio.gather(
        *(
            client.post(
                "/v1/subagents/prepare",
                json={
                    "parentSessionKey": parent_key,
                    "childSessionKey": key,
                    "contextMode": "fork",
                    "parentSessionId": parent,
                    "childSessionId": sid,
                },
            )
            for sid, key in children
        )
    )

    async def child(sid: str, key: str) -> None:
        transcript = list(copy)
        for n in range(args.child_turns):
            body = {"sessionId": sid, "sessionKey": key, "messages": transcript, "prompt": f"child task {n}"}
            await timed(client, {**body, "forked": True}, timings["child"])
            transcript += host_turn(f"child {sid[-4:]}", n)

    await asyncio.gather(*(child(sid, key) for sid, key in children))


async def run(args: argparse.Namespace) -> None:
    server = start_redis_server()
    try:
        settings = Settings(redis_url=server.url, ov_backoff_s=0, key_prefix="benchsub")
        fake = FakeOV()
        app = create_app(
            settings,
            redis=connect_async(settings),
            commit_redis=redis.Redis.from_url(server.url),
            ov_transport=fake.transport(),
        )
        timings: dict[str, list[float]] = {"parent": [], "child": []}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://bench", timeout=60) as client:
            before = len(fake.calls)
            for t in range(args.trees):
                await tree(client, app, settings, t, args, timings)
            calls = len(fake.calls) - before
        child_turns = args.trees * args.children * args.child_turns
        parent_calls = sum(1 for _, path in fake.calls if "/sessions/00000000-" in path)
        print(
            f"{args.trees} trees x (1 parent of {args.parent_turns} turns + {args.children} forked children at once "
            f"x {args.child_turns} turns), RPC in process over HTTP (ASGI), fake OV, redis-server {server.url}"
        )
        print(f"{'assemble':10} {'count':>6} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
        for name, samples in timings.items():
            print(
                f"{name:10} {len(samples):6d} {statistics.median(samples):9.3f} {percentile(samples, 0.99):9.3f} "
                f"{statistics.fmean(samples):9.3f}"
            )
        child_median, parent_median = statistics.median(timings["child"]), statistics.median(timings["parent"])
        print(f"child against parent: p50 {child_median / parent_median:.2f}x the time")
        print(
            f"OV requests: {calls} in all ({parent_calls} for the parents' sessions); per child turn "
            f"{(calls - parent_calls) / child_turns:.2f} (recall's searches; the fork's base reads no /context)"
        )
        await app.state.services.ov.aclose()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trees", type=int, default=50)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--child-turns", type=int, default=3)
    parser.add_argument("--parent-turns", type=int, default=20)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
