"""What redaction costs: capture's CPU per event, and the plugin's afterTurn, with it on (``mask``)
and off, measured in one run. Prints figures; not a test.

1. Capture: a redis-server on a free loopback port; ``--events`` afterTurn events (the whole
   transcript of the session's last ``--keep-turns`` turns, as OpenClaw sends it; each turn a
   question, a tool call, a tool result of ``--tool-kib`` KiB and an answer; every tenth turn
   pastes a key and a token) captured by one worker (burst) into the zero-latency in-memory
   FakeOV (its CPU is counted too: it stands in for the HTTP write). The process's CPU time for
   the run, per event; off and mask alternate ``--runs`` times each, medians compared.
2. The plugin: ``bench/redaction_plugin.mjs`` (Node, on the plugin's build) times what
   afterTurn does before it hands the event to the publisher (build the event, redact,
   encode) for sessions growing to ``--turns`` turns, each call given the whole transcript.

    .venv/bin/python bench/redaction_cost.py [--events 1500] [--tool-kib 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import uvloop  # noqa: E402

from core.config import Settings  # noqa: E402
from core.events import TurnEvent, encode  # noqa: E402
from workers.capture.worker import CaptureWorker  # noqa: E402
from workers.dev.fake_ov.app import FakeOV  # noqa: E402
from workers.dev.local_redis import start_redis_server  # noqa: E402
from workers.store.streams import publish_raw, stream_of_event  # noqa: E402

AWS = "AKIA" + "IOSFODNN7EXAMPLE"
TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
LINE = "2026-12-06 08:41:07 INFO build step {i}: compiled src/module_{i}.py in 0.{i}s (cache hit)\n"


def tool_output(kib: int, turn: int) -> str:
    lines, size, i = [], 0, 0
    while size < kib * 1024:
        line = LINE.format(i=i + turn)
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)


def turn_messages(i: int, kib: int) -> list[dict[str, Any]]:
    pasted = f" Use the key {AWS} and the token {TOKEN}." if i % 10 == 9 else ""
    return [
        {"role": "user", "content": f"Turn {i}: run the build and tell me what failed.{pasted}"},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": f"call-{i}", "name": "shell", "arguments": {"cmd": "make build"}}],
        },
        {"role": "toolResult", "toolCallId": f"call-{i}", "content": [{"type": "text", "text": tool_output(kib, i)}]},
        {"role": "assistant", "content": [{"type": "text", "text": f"Turn {i}: the build passed; nothing failed."}]},
    ]


def events(count: int, sessions: int, keep_turns: int, kib: int) -> list[TurnEvent]:
    names = [f"red-{uuid.uuid4().hex[:6]}-{s}" for s in range(sessions)]
    out = []
    for n in range(count):
        session, index = names[n % sessions], n // sessions
        messages = [m for i in range(max(0, index + 1 - keep_turns), index + 1) for m in turn_messages(i, kib)]
        out.append(
            TurnEvent(
                event_id=uuid.uuid4().hex,
                session_id=session,
                messages=messages,
                pre_prompt_message_count=len(messages) - 4,
                published_at=time.time(),
            )
        )
    return out


async def capture_cpu(settings: Settings, client: redis.Redis, batch: list[TurnEvent]) -> float:
    """CPU seconds of this process per event, one worker capturing ``batch``."""
    for event in batch:
        publish_raw(client, stream_of_event(settings, event), encode(event))
    fake = FakeOV()
    worker = CaptureWorker(settings, ov_transport=fake.transport(), burst=True, consumer="bench")
    started = time.process_time()
    await worker.run()
    cpu = time.process_time() - started
    assert worker.stats.applied == len(batch), worker.stats
    return cpu / len(batch)


def plugin_figures(turns: int, kib: int) -> str:
    node = os.environ.get("NODE", "node")
    script = ROOT / "bench" / "redaction_plugin.mjs"
    done = subprocess.run([node, str(script), str(turns), str(kib)], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else f"plugin bench failed: {done.stderr.strip()[-500:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1500)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--keep-turns", type=int, default=6)
    parser.add_argument("--tool-kib", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=60, help="turns of each session in the plugin's run")
    args = parser.parse_args()
    server = start_redis_server()
    try:
        client = redis.Redis.from_url(server.url)
        cpu: dict[str, list[float]] = {"off": [], "mask": []}
        for run in range(args.runs):
            for mode in ("off", "mask"):
                settings = Settings(redis_url=server.url, key_prefix=f"red{run}{mode}", redaction=mode)
                batch = events(args.events, args.sessions, args.keep_turns, args.tool_kib)
                cpu[mode].append(uvloop.run(capture_cpu(settings, client, batch)))
        off, mask = statistics.median(cpu["off"]), statistics.median(cpu["mask"])
        size = len(encode(events(1, 1, args.keep_turns, args.tool_kib)[0])) // 1024
        print(
            f"capture: {args.events} events of {args.sessions} sessions, the last {args.keep_turns} turns each "
            f"(a {args.tool_kib} KiB tool result a turn; the first events smaller, up to ~{size * args.keep_turns} KiB)"
        )
        print("  CPU per event, ms: off " + " ".join(f"{c * 1000:.3f}" for c in cpu["off"]), end="")
        print("; mask " + " ".join(f"{c * 1000:.3f}" for c in cpu["mask"]))
        print(f"  median: off {off * 1000:.3f} ms, mask {mask * 1000:.3f} ms: mask/off {mask / off:.3f}x")
    finally:
        server.stop()
    print(plugin_figures(args.turns, args.tool_kib))


if __name__ == "__main__":
    main()
