"""Assemble latency and capture throughput against a real openviking-server 0.5.2.

Prints figures; not a test. Starts what it needs on free loopback ports and
stops it at the end: a redis-server (or ``--redis-url``), the bundled
deterministic model server and a local openviking-server (or ``--base-url``,
an OV you run; the bench then leaves ``bench-*`` sessions in it).

(a) assemble, main call, on a session of ``--messages`` messages loaded into
    OV through the batch route: ovstream's snapshot path (the snapshot in
    Redis, caches in process) against the reference plugin's path (OV
    ``/context`` fetched and converted on every call, the same app with
    ``direct=True``). Timed as bench/assemble.py does, whose transcript and
    timing helpers this uses: through httpx's ASGITransport (an HTTP client
    included), straight into the ASGI app (the server's stack) and as the
    assemble function alone. p50 / p99 and the ratio.
(b) capture throughput, the same messages three ways: one ``add_message``
    call per message (the reference plugin's afterTurn), the batch route (one
    ``add_messages`` call per session, chunks of <=100), and ovstream's
    capture worker end to end (turn events published to the streams first,
    then a CaptureWorker started and timed until it has written them all:
    batch writes, applied offsets, snapshot refreshes). Messages per second and the ratio to one-a-call.

    .venv/bin/python bench/real_ov.py [--messages 200] [--requests 300]
        [--sessions 10] [--turns 10] [--base-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import signal
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import msgspec  # noqa: E402
import redis  # noqa: E402
import redis.asyncio  # noqa: E402
import uvloop  # noqa: E402

from core.config import Settings  # noqa: E402
from core.events import TurnEvent  # noqa: E402
from core.ov.client import OVClient  # noqa: E402
from workers.capture.worker import CaptureWorker  # noqa: E402
from workers.dev.demo_services import ov_answers, start_local_stack  # noqa: E402
from workers.dev.local_redis import redis_answers, start_redis_server  # noqa: E402
from workers.rpc.app import create_app  # noqa: E402
from workers.rpc.assemble import assemble  # noqa: E402
from workers.rpc.context import resolve_caller  # noqa: E402
from workers.rpc.models import decode_assemble_request  # noqa: E402
from workers.rpc.responses import json_response  # noqa: E402
from workers.store.applied import CAPTURED_THROUGH, LAST_ID  # noqa: E402
from workers.store.keys import Keys, scope_of, shard_of  # noqa: E402
from workers.store.streams import publish_turn  # noqa: E402


def _load_bench_assemble() -> Any:
    spec = importlib.util.spec_from_file_location("bench_assemble", ROOT / "bench" / "assemble.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ba = _load_bench_assemble()
transcript, percentile, timed, asgi_call = _ba.transcript, _ba.percentile, _ba.timed, _ba.asgi_call
AGENT = _ba.AGENT
CAPTURE_TIMEOUT_S = 120.0
"""Hang guard of the capture worker run (it takes a second or two)."""


def say(line: str = "") -> None:
    print(line, flush=True)


def row(name: str, samples: list[float]) -> str:
    return (
        f"{name:34} {statistics.median(samples):9.3f} {percentile(samples, 0.99):9.3f} {statistics.fmean(samples):9.3f}"
    )


# --- (a) assemble ---------------------------------------------------------------------------


async def bench_assemble(settings: Settings, rds: redis.Redis, args: argparse.Namespace) -> list[str]:
    session_id = f"bench-assemble-{uuid.uuid4().hex[:8]}"
    openclaw, ov_messages = transcript(args.messages)
    snapshot_app = create_app(settings, redis=redis.asyncio.Redis.from_url(settings.redis_url), commit_redis=rds)
    direct_app = create_app(
        settings, redis=redis.asyncio.Redis.from_url(settings.redis_url), commit_redis=rds, direct=True
    )
    try:
        t0 = time.perf_counter()
        added = await snapshot_app.state.services.ov.add_messages(session_id, ov_messages)
        load_s = time.perf_counter() - t0
        state = await snapshot_app.state.services.ov.get_session(session_id)
        assert state.message_count == len(ov_messages), (state, added)
        # What capture records after applying the session's last turn (as bench/assemble.py does).
        shard, scope = shard_of(session_id, settings.shards), scope_of(None, AGENT)
        rds.hset(
            Keys(settings.key_prefix).applied(shard, scope, session_id),
            mapping={LAST_ID: "1760000000000-0", CAPTURED_THROUGH: len(openclaw)},
        )
        body = {"sessionId": session_id, "messages": openclaw, "tokenBudget": 128_000, "prompt": "next"}
        payload = json.dumps(body).encode()
        request = decode_assemble_request(payload)
        caller = resolve_caller(settings, session_id=session_id, session_key=None, runtime_context=None, api_key=None)
        results: dict[str, list[float]] = {}
        out_count = 0
        for name, app in (("snapshot", snapshot_app), ("direct", direct_app)):
            svc = app.state.services
            first = msgspec.json.decode(json_response(await assemble(svc, request, caller)).body)
            out_count = len(first["messages"])
            assert out_count >= args.messages // 2, f"{name}: assemble did not use the session"
            headers = {"content-type": "application/json"}
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://bench") as c:

                async def over_http() -> None:
                    r = await c.post("/v1/assemble", content=payload, headers=headers)
                    r.raise_for_status()

                results[f"{name} via HTTP (ASGI)"] = await timed(args.requests, over_http)
            results[f"{name} ASGI app (server)"] = await timed(args.requests, lambda: asgi_call(app, payload))
            results[f"{name} handler only"] = await timed(args.requests, lambda: assemble(svc, request, caller))
    finally:
        for app in (snapshot_app, direct_app):
            await app.state.services.ov.aclose()
    lines = [
        f"(a) assemble main call, {args.messages}-message session in real OV (loaded via the batch "
        f"route in {load_s * 1000:.0f} ms; {len(openclaw)} OpenClaw messages in, {out_count} out), "
        f"{args.requests} requests each after 50 warm-up calls",
        "",
        f"{'path':34} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}",
    ]
    lines += [row(name, samples) for name, samples in results.items()]
    lines.append("")
    for mode in ("via HTTP (ASGI)", "ASGI app (server)", "handler only"):
        snap, direct = results[f"snapshot {mode}"], results[f"direct {mode}"]
        lines.append(
            f"snapshot speed-up {mode}: p50 {statistics.median(direct) / statistics.median(snap):.1f}x, "
            f"p99 {percentile(direct, 0.99) / percentile(snap, 0.99):.1f}x"
        )
    return lines


# --- (b) capture ----------------------------------------------------------------------------


def _sessions(args: argparse.Namespace, tag: str) -> list[str]:
    run = uuid.uuid4().hex[:8]
    return [f"bench-capture-{tag}-{run}-{i}" for i in range(args.sessions)]


async def _count_check(ov: OVClient, sessions: list[str], per_session: int, what: str) -> None:
    for sid in sessions:
        state = await ov.get_session(sid)
        if state.message_count != per_session:
            raise AssertionError(f"{what}: session {sid} has {state.message_count} messages, expected {per_session}")


async def bench_capture(settings: Settings, rds: redis.Redis, args: argparse.Namespace) -> list[str]:
    per_session = 2 * args.turns
    openclaw, ov_messages = transcript(per_session)
    total = per_session * args.sessions
    rates: dict[str, float] = {}
    async with OVClient.from_settings(settings) as base:
        ov = base.scoped(peer=AGENT)
        sessions = _sessions(args, "single")
        t0 = time.perf_counter()
        for sid in sessions:
            for message in ov_messages:
                await ov.add_message(sid, message)
        rates["one message a call (add_message)"] = total / (time.perf_counter() - t0)
        await _count_check(ov, sessions, per_session, "one a call")

        sessions = _sessions(args, "batch")
        t0 = time.perf_counter()
        for sid in sessions:
            await ov.add_messages(sid, ov_messages)
        rates["batch route, one call per session"] = total / (time.perf_counter() - t0)
        await _count_check(ov, sessions, per_session, "batch")

        sessions = _sessions(args, "worker")
        for turn in range(args.turns):  # the order OpenClaw's afterTurn calls arrive in
            for sid in sessions:
                end = 2 * (turn + 1)
                publish_turn(
                    rds,
                    settings,
                    TurnEvent(
                        event_id=uuid.uuid4().hex,
                        session_id=sid,
                        messages=openclaw[:end],
                        pre_prompt_message_count=end - 2,
                        published_at=time.time(),
                    ),
                )
        worker = CaptureWorker(settings)
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.run())
        try:
            # Done when every message is written (not when a burst notices it is idle).
            while worker.stats.messages_written < total:
                if task.done():
                    raise RuntimeError(f"the capture worker stopped early: {task.exception()!r}")
                if time.perf_counter() - t0 > CAPTURE_TIMEOUT_S:
                    raise RuntimeError(
                        f"the capture worker wrote {worker.stats.messages_written} of "
                        f"{total} messages in {CAPTURE_TIMEOUT_S:g} s"
                    )
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - t0
        finally:
            worker.stop()
            async with asyncio.timeout(60):
                await task
        rates["capture worker end to end (batch)"] = total / elapsed
        await _count_check(ov, sessions, per_session, "capture worker")
        stats = worker.stats
    base_rate = rates["one message a call (add_message)"]
    lines = [
        f"(b) capture into real OV: {args.sessions} sessions x {args.turns} turns = {total} messages "
        f"(user + assistant per turn), the same messages each way",
        "",
        f"{'way':40} {'msgs/s':>9} {'vs one a call':>14}",
    ]
    lines += [f"{name:40} {rate:9.0f} {rate / base_rate:13.1f}x" for name, rate in rates.items()]
    lines += [
        "",
        f"capture worker: {stats.read} entries read, {stats.ov_writes} OV batch writes, "
        f"{stats.messages_written} messages written, {stats.snapshots} snapshot refreshes "
        f"(each a GET /context), {elapsed:.2f} s",
    ]
    return lines


# --- running -----------------------------------------------------------------------------------


async def run(args: argparse.Namespace, redis_url: str, base_url: str) -> None:
    settings = Settings(
        redis_url=redis_url, base_url=base_url, ov_backoff_s=0, commit_token_threshold=10**9
    )  # (b) measures writes, not commits
    rds = redis.Redis.from_url(redis_url)
    try:
        say("\n".join(await bench_assemble(settings, rds, args)))
        say()
        say()
        say("\n".join(await bench_capture(settings, rds, args)))
    finally:
        rds.close()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200, help="(a) session size (default 200)")
    parser.add_argument("--requests", type=int, default=300, help="(a) timed requests per way (default 300)")
    parser.add_argument("--sessions", type=int, default=10, help="(b) sessions (default 10)")
    parser.add_argument("--turns", type=int, default=10, help="(b) turns per session (default 10)")
    parser.add_argument("--base-url", default=None, help="an OV to use instead of starting one")
    parser.add_argument("--redis-url", default=None, help="a Redis to use instead of starting one")
    args = parser.parse_args()
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so what was started is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    with ExitStack() as stack:
        if args.redis_url:
            if not redis_answers(args.redis_url):
                sys.exit(f"no Redis answers at {args.redis_url}")
            redis_url = args.redis_url
        else:
            server = start_redis_server()
            stack.callback(server.stop)
            redis_url = server.url
            say(f"started redis-server pid {server.proc.pid} at {redis_url}")
        if args.base_url:
            version = ov_answers(args.base_url)
            if version is None:
                sys.exit(f"no OV answers at {args.base_url}/health")
            base_url = args.base_url
            say(f"using OV {base_url} (openviking {version})")
        else:
            base_url = start_local_stack(stack, say)
        say()
        try:
            uvloop.run(run(args, redis_url, base_url))  # the event loop ovstream rpc and capture run on
        except KeyboardInterrupt:
            say("interrupted")
        say()
        say("stopping what the bench started")


if __name__ == "__main__":
    main()
