"""The RPC against its floor, over real TCP: assemble req/s and p50 with 1 and 2 serving
processes, beside a bare uvicorn app (uvloop, httptools, as ``ovstream rpc``) that reads
the same request body and answers the same response body. Prints figures; not a test.

Everything runs here: a redis-server, the FakeOV over HTTP (``ovstream fake-ov``), the
servers as processes; a 200-message session is captured first, so every assemble is a
snapshot hit. Two requests, each against its own floor: the plugin's main call (its
turns, the host's transcript sent as its count) and a call carrying the transcript (a
caller that sends no turns). The load is ``--clients`` keep-alive connections for
``--seconds`` per server; the servers are loaded in turn, ``--rounds`` times, and each
one's median round is printed; all in this run. wrk generates the load when it is
installed (``apt install wrk``): the load generator shares the machine's CPUs, and this
one (C) needs far less of them per request than the servers do. ``--load python`` uses
asyncio streams here instead, which on a 2-core machine caps the echo at the client's
own rate (its figures then flatter the RPC).

    .venv/bin/python bench/rpc_floor.py [--clients 16] [--seconds 3] [--rounds 3] [--load wrk|python]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
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
from processes import OVSTREAM, group_cpu_seconds, ovstream_env, spawn, stop, wait_http, work_dir  # bench/processes.py

from core.config import Settings
from core.events import TurnEvent
from workers.dev.local_redis import free_port, start_redis_server
from workers.store.streams import publish_turn

ECHO_APP = """
import os
import sys

import uvicorn

ANSWER = open(os.environ["OVSTREAM_ECHO_ANSWER"], "rb").read()


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


if __name__ == "__main__":
    uvicorn.run(
        "echo:app",
        app_dir=os.path.dirname(os.path.abspath(__file__)),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        workers=int(sys.argv[2]),
        loop="uvloop",
        http="httptools",
        log_level="warning",
    )
"""
"""The floor: uvicorn serving an app that only reads the body and answers fixed bytes
(``echo.py <port> <processes>``, the answer's file in ``$OVSTREAM_ECHO_ANSWER``)."""


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


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
local f = io.open(os.getenv("OVSTREAM_BENCH_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
"""
"""wrk's request: POST /v1/assemble with the body from the file the environment names."""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def load_wrk(port: int, body: bytes, clients: int, seconds: float, server_pgid: int) -> Measured:
    """``load``, generated by wrk (C, one thread): a client that needs far less CPU per
    request than the server, so the echo's figures are the server's and not the client's."""
    work = work_dir("rpc-floor-wrk")
    (work / "body.json").write_bytes(body)
    (work / "post.lua").write_text(WRK_SCRIPT)
    env = {**os.environ, "OVSTREAM_BENCH_BODY": str(work / "body.json")}

    def wrk(duration: float) -> str:
        argv = ["wrk", "-t1", f"-c{clients}", f"-d{duration:g}s", "--latency", "-s", str(work / "post.lua")]
        done = subprocess.run([*argv, f"http://127.0.0.1:{port}/v1/assemble"], env=env, capture_output=True, text=True)
        if done.returncode != 0 or "Non-2xx" in done.stdout:
            raise RuntimeError(f"wrk: {done.stdout[-500:]} {done.stderr[-500:]}")
        return done.stdout

    wrk(1)  # warm up
    cpu_before = group_cpu_seconds(server_pgid)
    out = wrk(seconds).splitlines()
    cpu = group_cpu_seconds(server_pgid) - cpu_before
    rate = float(next(line for line in out if line.startswith("Requests/sec")).split()[1])
    p50 = next(line for line in out if line.strip().startswith("50%")).split()[1]
    number, unit = p50.rstrip("mus"), p50[len(p50.rstrip("mus")) :]
    return Measured(rate, float(number) * _UNITS[unit], cpu / (rate * seconds) * 1e6)


class Measured(NamedTuple):
    rate: float
    """requests per second"""
    p50_ms: float
    cpu_us: float
    """the server's CPU per request (all its processes), microseconds"""


ECHO = "bare uvicorn echo (same bodies)"
ONE, TWO = ", 1 process", ", 2 processes"
SOLO = ", 1 client"
"""Rows measured with one client: the latency of a request that waits for no other."""


def size(data: bytes) -> str:
    return f"{len(data) / 1024:.0f} KiB" if len(data) >= 10240 else f"{len(data)} B"


def measure(
    env: dict[str, str], work: Path, body: bytes, clients: int, seconds: float, rounds: int, with_wrk: bool
) -> tuple[dict[str, Measured], bytes]:
    """req/s, p50 and CPU of ``ovstream rpc`` with 1 and 2 processes and of the echo app
    answering what the RPC answered (1 and 2 processes too), each under the same load of ``body``: all four
    servers up at once and loaded in turn, ``rounds`` times, the median round of each kept.
    (The load generator shares this machine's CPUs, and the echo's rate swings by a third
    from one run to the next; taking turns exposes every server to the same swings.)"""
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for workers in (1, 2):
            port = free_port()
            argv = [*OVSTREAM, "--log-level", "WARNING", "rpc", "--port", str(port), "--workers", str(workers)]
            servers["assemble" + (TWO if workers > 1 else ONE)] = (
                spawn(argv, env, work / f"rpc{workers}.log"),
                port,
            )
            wait_http(f"http://127.0.0.1:{port}/healthz")
        answered = httpx.post(f"http://127.0.0.1:{servers['assemble' + ONE][1]}/v1/assemble", content=body)
        if answered.status_code != 200 or not answered.json()["messages"]:
            raise RuntimeError(f"assemble did not answer from the snapshot: {answered.text[:300]}")
        answer = answered.content
        (work / "answer.json").write_bytes(answer)
        (work / "echo.py").write_text(ECHO_APP)
        echo_env = {**env, "OVSTREAM_ECHO_ANSWER": str(work / "answer.json")}
        for workers in (1, 2):
            port = free_port()
            echo = spawn(
                [sys.executable, str(work / "echo.py"), str(port), str(workers)], echo_env, work / f"echo{workers}.log"
            )
            servers[ECHO if workers == 1 else ECHO + TWO] = (echo, port)
            wait_http(f"http://127.0.0.1:{port}/")
        runs: dict[str, list[Measured]] = {}

        def loaded(port: int, clients: int, pgid: int) -> Measured:
            if with_wrk:
                return load_wrk(port, body, clients, seconds, pgid)
            return asyncio.run(load(port, body, clients, seconds, pgid))

        for _ in range(rounds):
            for name, (proc, port) in servers.items():
                runs.setdefault(name, []).append(loaded(port, clients, proc.pid))
                if not name.endswith(TWO):
                    runs.setdefault(name + SOLO, []).append(loaded(port, 1, proc.pid))
    finally:
        for proc, _ in servers.values():
            stop(proc)
    return {name: median_round(measured) for name, measured in runs.items()}, answer


def median_round(rounds: list[Measured]) -> Measured:
    """The round of median throughput (its p50 and CPU with it: one round's figures)."""
    return sorted(rounds, key=lambda m: m.rate)[len(rounds) // 2]


def captured_session(redis_url: str, messages: list[dict[str, Any]], work: Path, procs: list[Any]) -> dict[str, str]:
    """Starts the fake OV (appended to ``procs``) and captures ``messages`` as session "bench",
    so every assemble of it is a snapshot hit; the environment of an ``ovstream`` process."""
    ov_port = free_port()
    env = ovstream_env({"OVSTREAM_REDIS_URL": redis_url, "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}"})
    procs.append(spawn([*OVSTREAM, "fake-ov", "--port", str(ov_port)], env, work / "ov.log"))
    wait_http(f"http://127.0.0.1:{ov_port}/health")
    client = redis.Redis.from_url(redis_url)
    event = TurnEvent(event_id="bench", session_id="bench", messages=messages, published_at=time.time())
    publish_turn(client, Settings(redis_url=redis_url), event)
    client.close()
    spawn([*OVSTREAM, "capture", "--burst"], env, work / "capture.log").wait(timeout=60)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--load",
        choices=("wrk", "python"),
        default="wrk" if shutil.which("wrk") else "python",
        help="the load generator: wrk (apt install wrk; the default when installed) or asyncio streams here",
    )
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    work = work_dir("rpc-floor")
    server = start_redis_server()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        messages = conversation(args.messages)
        env = captured_session(server.url, messages, work, procs)
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
            results, answer = measure(env, work, body, args.clients, args.seconds, args.rounds, args.load == "wrk")
            print(
                f"\n{title}: {args.clients} keep-alive clients (and 1), {args.seconds:g} s each,"
                f" median of {args.rounds} rounds, load from {args.load},"
                f" request {size(body)}, answer {size(answer)} ({args.messages}-message session, snapshot hits)"
            )
            header = f"{'server':<44} {'req/s':>8} {'of floor':>9} {'p50 ms':>7} {'x floor':>8}"
            print(f"{header} {'CPU us/req':>11} {'floor/CPU':>10}")
            for name, m in results.items():
                floor = results[ECHO + (SOLO if name.endswith(SOLO) else TWO if name.endswith(TWO) else "")]
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
