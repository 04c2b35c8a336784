"""The RPC against its floor, over real TCP: assemble req/s and p50 with 1 and 2 serving
processes, beside a bare uvicorn app (uvloop, httptools, as ``ovstream rpc``) that reads
the same request body and answers the same response body. Prints figures; not a test.

Everything runs here: a redis-server, the FakeOV over HTTP (``ovstream fake-ov``), the
servers as processes; a 200-message session is captured first, so every assemble is a
snapshot hit. Two requests, each against its own floor: the plugin's main call (its
turns, the host's transcript sent as its count) and a call carrying the transcript (a
caller that sends no turns). The load is ``--clients`` keep-alive connections (asyncio streams, no HTTP
client library in the way) for ``--seconds`` per server, measured in this one run.

    .venv/bin/python bench/rpc_floor.py [--clients 16] [--seconds 5] [--messages 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import redis
from processes import OVSTREAM, group_cpu_seconds, spawn, stop, wait_http  # bench/processes.py

from core.config import Settings
from core.events import TurnEvent
from workers.dev.local_redis import free_port, start_redis_server
from workers.store.streams import publish_turn

ECHO_APP = """
import sys

import uvicorn

ANSWER = open(sys.argv[1], "rb").read()


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), loop="uvloop", http="httptools", log_level="warning")
"""
"""The floor: uvicorn serving an app that only reads the body and answers fixed bytes."""


def conversation(messages: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(messages):
        words = " ".join(f"word{(i * 7 + j) % 97}" for j in range(40 + (i * 13) % 120))
        if i % 2 == 0:
            out.append({"role": "user", "content": f"Question {i}: {words}"})
        else:
            out.append({"role": "assistant", "content": [{"type": "text", "text": f"Answer {i}: {words}"}]})
    return out


async def one_client(port: int, request: bytes, until: float, latencies: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head[:200].decode())
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        writer.close()


async def load(port: int, body: bytes, clients: int, seconds: float, server_pgid: int) -> Measured:
    request = (
        b"POST /v1/assemble HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    latencies: list[float] = []
    warm_until = time.perf_counter() + 1.0
    await asyncio.gather(*(one_client(port, request, warm_until, []) for _ in range(clients)))
    cpu_before = group_cpu_seconds(server_pgid)
    until = time.perf_counter() + seconds
    await asyncio.gather(*(one_client(port, request, until, latencies) for _ in range(clients)))
    cpu_us = (group_cpu_seconds(server_pgid) - cpu_before) / len(latencies) * 1e6
    return Measured(len(latencies) / seconds, statistics.median(latencies), cpu_us)


class Measured(NamedTuple):
    rate: float
    """requests per second"""
    p50_ms: float
    cpu_us: float
    """the server's CPU per request (all its processes), microseconds"""


ECHO = "bare uvicorn echo (same bodies)"
SOLO = ", 1 client"
"""Rows measured with one client: the latency of a request that waits for no other."""


def size(data: bytes) -> str:
    return f"{len(data) / 1024:.0f} KiB" if len(data) >= 10240 else f"{len(data)} B"


def measure(
    env: dict[str, str], work: Path, body: bytes, clients: int, seconds: float
) -> tuple[dict[str, Measured], bytes]:
    """req/s and p50 of ``ovstream rpc`` with 1 and 2 processes and of the echo app
    answering what the RPC answered, each under the same load of ``body``."""
    results: dict[str, Measured] = {}
    answer = b""
    for workers in (1, 2):
        port = free_port()
        rpc = spawn(
            [*OVSTREAM, "--log-level", "WARNING", "rpc", "--port", str(port), "--workers", str(workers)],
            env,
            work / f"rpc{workers}.log",
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz")
            answered = httpx.post(f"http://127.0.0.1:{port}/v1/assemble", content=body, timeout=30)
            if answered.status_code != 200 or not answered.json()["messages"]:
                raise RuntimeError(f"assemble did not answer from the snapshot: {answered.text[:300]}")
            answer = answered.content
            name = f"assemble, {workers} process{'es' if workers > 1 else ''}"
            results[name] = asyncio.run(load(port, body, clients, seconds, rpc.pid))
            if workers == 1:
                results[name + SOLO] = asyncio.run(load(port, body, 1, seconds, rpc.pid))
        finally:
            stop(rpc)
    (work / "answer.json").write_bytes(answer)
    (work / "echo.py").write_text(ECHO_APP)
    port = free_port()
    echo = spawn([sys.executable, str(work / "echo.py"), str(work / "answer.json"), str(port)], env, work / "echo.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/")
        results[ECHO] = asyncio.run(load(port, body, clients, seconds, echo.pid))
        results[ECHO + SOLO] = asyncio.run(load(port, body, 1, seconds, echo.pid))
    finally:
        stop(echo)
    return results, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"ovstream-rpc-floor-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    server = start_redis_server()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ov_port = free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}
        env = {**base, "OVSTREAM_REDIS_URL": server.url, "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}"}
        procs.append(spawn([*OVSTREAM, "fake-ov", "--port", str(ov_port)], env, work / "ov.log"))
        wait_http(f"http://127.0.0.1:{ov_port}/health")
        messages = conversation(args.messages)
        client = redis.Redis.from_url(server.url)
        publish_turn(
            client,
            Settings(redis_url=server.url),
            TurnEvent(event_id="bench", session_id="bench", messages=messages, published_at=time.time()),
        )
        capture = spawn([*OVSTREAM, "capture", "--burst"], env, work / "capture.log")
        capture.wait(timeout=60)
        client.close()
        bodies = {
            # What the plugin sends (2026.9 host, autoCapture on): its turns, the transcript counted.
            "plugin's call (turns, transcript counted)": {
                "sessionId": "bench",
                "messageCount": len(messages),
                "prompt": "next",
                "heldTurns": [],
                "recentTurns": [],
            },
            # A caller that sends no turns (autoCapture off, older plugins): the transcript itself.
            "transcript sent": {"sessionId": "bench", "messages": messages, "prompt": "next"},
        }
        for title, fields in bodies.items():
            body = json.dumps(fields).encode()
            results, answer = measure(env, work, body, args.clients, args.seconds)
            print(
                f"\n{title}: {args.clients} keep-alive clients (and 1), {args.seconds:g} s each,"
                f" request {size(body)}, answer {size(answer)} ({args.messages}-message session, snapshot hits)"
            )
            header = f"{'server':<44} {'req/s':>8} {'of floor':>9} {'p50 ms':>7} {'x floor':>8}"
            print(f"{header} {'CPU us/req':>11} {'floor/CPU':>10}")
            for name, m in results.items():
                floor = results[ECHO + SOLO] if name.endswith(SOLO) else results[ECHO]
                print(
                    f"{name:<44} {m.rate:>8,.0f} {m.rate / floor.rate:>9.0%} {m.p50_ms:>7.2f}"
                    f" {m.p50_ms / floor.p50_ms:>7.2f}x {m.cpu_us:>11.0f} {floor.cpu_us / m.cpu_us:>9.0%}"
                )
    finally:
        for proc in procs:
            stop(proc)
        server.stop()


if __name__ == "__main__":
    main()
