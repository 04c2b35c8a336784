"""Redis memory per queued turn event, and how long an outage a Redis of a given size absorbs.

Nothing caps a turn stream at publish any more (capture trims what it applied), so while
capture or OV is away the backlog grows in Redis. This measures what it costs: a real
redis-server on a free loopback port, N turn events published the way the plugin does,
``used_memory`` before and after. Two shapes:

- commitTurn (OpenClaw >= 2026.8.1): the event carries its own turn: a user message, a
  tool call and its result, an assistant answer;
- afterTurn (older hosts): the event carries the whole transcript so far; measured at
  ``--turns-so-far`` turns into the conversation.

    .venv/bin/python bench/backlog_memory.py [--events 5000] [--turns-so-far 20] [--rate 200] [--redis-gb 4]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from core.config import Settings
from core.events import TurnEvent, encode
from workers.dev.local_redis import start_redis_server
from workers.store.streams import publish_turn

USER_TEXT = "Could you check why the nightly export job failed and fix the config if it is wrong? " * 2
ANSWER_TEXT = "The export failed because the bucket name changed; I updated config/export.yaml. " * 5
TOOL_OUTPUT = "line of a log file the tool returned, as agents see them in practice\n" * 12


def one_turn(i: int) -> list[dict[str, Any]]:
    call = f"call_{i}"
    return [
        {"role": "user", "content": USER_TEXT, "timestamp": 1_700_000_000_000 + i},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": call, "name": "bash", "arguments": {"command": "tail -n 12 x"}}],
        },
        {
            "role": "toolResult",
            "toolCallId": call,
            "toolName": "bash",
            "content": [{"type": "text", "text": TOOL_OUTPUT}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": ANSWER_TEXT}]},
    ]


def commit_turn_event(session: str, i: int) -> TurnEvent:
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=one_turn(i),
        advancement_key=f"{session}:{i}",
        published_at=time.time(),
    )


def after_turn_event(session: str, turns_so_far: int) -> TurnEvent:
    messages = [m for i in range(turns_so_far + 1) for m in one_turn(i)]
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=messages,
        pre_prompt_message_count=4 * turns_so_far,
        published_at=time.time(),
    )


def measure(client: redis.Redis, settings: Settings, events: list[TurnEvent]) -> float:
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    for event in events:
        publish_turn(client, settings, event)
    after = int(client.info("memory")["used_memory"])
    return (after - before) / len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--turns-so-far", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200.0, help="turns per second the deployment takes")
    parser.add_argument("--redis-gb", type=float, default=4.0, help="Redis memory set aside for the backlog")
    args = parser.parse_args()
    server = start_redis_server()
    try:
        client = redis.Redis.from_url(server.url)
        settings = Settings(redis_url=server.url, shards=4)
        sessions = [f"s{i}" for i in range(200)]
        shapes = {
            "commitTurn (one turn)": [commit_turn_event(sessions[i % 200], i) for i in range(args.events)],
            f"afterTurn ({args.turns_so_far} turns in)": [
                after_turn_event(sessions[i % 200], args.turns_so_far) for i in range(args.events)
            ],
        }
        budget = args.redis_gb * 1024**3
        print(f"{args.events} events per shape; at {args.rate:.0f} turns/s, a {args.redis_gb:g} GB Redis holds:")
        for name, events in shapes.items():
            per_turn = measure(client, settings, events)
            payload = sum(len(encode(e)) for e in events) / len(events)
            hours = budget / per_turn / args.rate / 3600
            print(
                f"  {name:<24} {per_turn / 1024:7.2f} KiB in Redis per turn "
                f"(event JSON {payload / 1024:.2f} KiB): {budget / per_turn:>12,.0f} turns = {hours:5.2f} h of outage"
            )
        client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
