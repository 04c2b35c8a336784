"""Capture throughput and end-to-end latency. Prints figures; not a test.

Starts a redis-server on a free loopback port and runs, in one process (on uvloop,
as ``ovstream capture`` does):

1. raw: redis-py pipelined XADD of N entries (the same payloads), then
   XREADGROUP COUNT 100 + XACK until all are read — the ceiling Redis and the
   client allow;
2. throughput: the same N turn events read by ONE capture worker and written
   to a zero-latency in-memory FakeOV (MockTransport), snapshots and all;
3. latency: a publisher thread sends turns at a fixed rate (default 200/s)
   while the worker runs; per turn, the time from just before its XADD to the
   refresh of a snapshot that includes it;
4. backlog recovery: a backlog of large afterTurn events (default 2,000 of ~40 KiB, a
   long transcript each) on one shard, captured by one worker with the default lease: MB/s,
   events/s, and the longest gap between two renewals of the shard's lease while it worked
   (target: under a third of the lease, so a busy machine has two more renewals to spare).

    .venv/bin/python bench/capture.py [--events 6000] [--sessions 200] [--rate 200] [--seconds 10]
                                      [--backlog-events 2000] [--backlog-kib 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
import uvloop

from core.config import Settings
from core.events import ContextSnapshot, TurnEvent, encode
from workers.capture.worker import CaptureWorker
from workers.dev.fake_ov.app import FakeOV
from workers.dev.local_redis import start_redis_server
from workers.store.applied import parse_id
from workers.store.streams import publish_raw, stream_of_event

RAW_BATCH = 100


def turn_event(session: str, index: int, *, keep_turns: int, pad: str = "") -> TurnEvent:
    """Turn ``index`` of a session: OpenClaw sends the transcript (here its last ``keep_turns``
    turns), each message ``pad`` longer."""
    first = max(0, index + 1 - keep_turns)
    messages: list[dict[str, Any]] = []
    for i in range(first, index + 1):
        messages.append(
            {
                "role": "user",
                "content": f"question {i} of {session}: how does capture keep order?{pad}",
                "timestamp": 1_700_000_000 + i,
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": f"answer {i}: one consumer per shard, entries applied in stream order.{pad}",
                    }
                ],
            }
        )
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=messages,
        pre_prompt_message_count=len(messages) - 2,
        published_at=time.time(),
    )


def workload(events: int, sessions: int, keep_turns: int) -> list[TurnEvent]:
    names = [f"bench-{i:04d}" for i in range(sessions)]
    return [turn_event(names[n % sessions], n // sessions, keep_turns=keep_turns) for n in range(events)]


def bench_raw(client: redis.Redis, settings: Settings, payloads: list[tuple[str, bytes]]) -> float:
    """Entries per second through pipelined XADD then XREADGROUP + XACK (one stream per shard)."""
    streams = sorted({s for s, _ in payloads})
    for s in streams:
        client.xgroup_create(f"raw:{s}", "g", id="0", mkstream=True)
    started = time.perf_counter()
    for i in range(0, len(payloads), RAW_BATCH):
        pipe = client.pipeline(transaction=False)
        for stream, payload in payloads[i : i + RAW_BATCH]:
            pipe.xadd(f"raw:{stream}", {"e": payload})
        pipe.execute()
    read = 0
    while read < len(payloads):
        for s in streams:
            reply = client.xreadgroup("g", "c", {f"raw:{s}": ">"}, count=RAW_BATCH)
            if reply:
                ids = [entry_id for entry_id, _ in reply[0][1]]
                client.xack(f"raw:{s}", "g", *ids)
                read += len(ids)
    return len(payloads) / (time.perf_counter() - started)


async def bench_capture(settings: Settings, client: redis.Redis, events: list[TurnEvent]) -> dict[str, float]:
    for event in events:
        publish_raw(client, stream_of_event(settings, event), encode(event))
    fake = FakeOV()
    worker = CaptureWorker(settings, ov_transport=fake.transport(), burst=True, consumer="bench")
    forget = asyncio.create_task(forget_requests(fake))
    started = time.perf_counter()
    await worker.run()
    elapsed = time.perf_counter() - started
    forget.cancel()
    stored = sum(len(s.messages) + sum(len(a.messages) for a in s.archives) for s in fake.sessions.values())
    assert worker.stats.applied == len(events), worker.stats
    assert stored == 2 * len(events), (stored, len(events))
    return {
        "seconds": elapsed,
        "events_s": len(events) / elapsed,
        "messages_s": worker.stats.messages_written / elapsed,
        "ov_writes": worker.stats.ov_writes,
        "snapshots": worker.stats.snapshots,
    }


async def bench_latency(
    settings: Settings, url: str, rate: float, seconds: float, sessions: int, keep_turns: int
) -> list[float]:
    fake = FakeOV()
    published: dict[str, list[tuple[tuple[int, int], float]]] = {}
    latencies: list[float] = []
    lock = threading.Lock()

    def on_snapshot(snapshot: ContextSnapshot) -> None:
        now = time.time()
        applied = parse_id(snapshot.applied_stream_id)
        with lock:
            waiting = published.get(snapshot.ov_session_id, [])
            done = [t for order, t in waiting if order <= applied]
            published[snapshot.ov_session_id] = [(o, t) for o, t in waiting if o > applied]
        latencies.extend(now - t for t in done)

    worker = CaptureWorker(settings, ov_transport=fake.transport(), consumer="latency", on_snapshot=on_snapshot)
    task = asyncio.create_task(worker.run())
    forget = asyncio.create_task(forget_requests(fake))
    await asyncio.sleep(0.3)  # shards acquired
    total = int(rate * seconds)
    events = workload(total, sessions, keep_turns)

    def publisher() -> None:
        client = redis.Redis.from_url(url)
        start = time.perf_counter()
        for n, event in enumerate(events):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            payload, stream = encode(event), stream_of_event(settings, event)
            sent_at = time.time()
            with lock:  # registered before the XADD returns, so a fast snapshot cannot miss it
                entry_id = client.xadd(stream, {"e": payload})
                published.setdefault(event.session_id, []).append((parse_id(entry_id.decode()), sent_at))
        client.close()

    thread = threading.Thread(target=publisher)
    thread.start()
    await asyncio.to_thread(thread.join)
    deadline = time.monotonic() + 30
    while len(latencies) < total and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    worker.stop()
    await task
    forget.cancel()
    return latencies


async def bench_backlog(settings: Settings, client: redis.Redis, events: int, kib: int) -> dict[str, float]:
    """A backlog of ``events`` afterTurn events of about ``kib`` KiB on one shard, captured by
    one worker with the default lease; rates and the longest gap between lease renewals."""
    keep_turns = 20
    pad = " filler" * max(0, (kib * 1024 // (2 * keep_turns) - 80) // 7)
    sessions = 20
    backlog = [
        turn_event(f"backlog-{n % sessions:02d}", n // sessions, keep_turns=keep_turns, pad=pad) for n in range(events)
    ]
    payloads = [encode(e) for e in backlog]
    await CaptureWorker(settings, ov_transport=FakeOV().transport(), burst=True).run()  # the group, then away
    for event, payload in zip(backlog, payloads):
        publish_raw(client, stream_of_event(settings, event), payload)
    fake = FakeOV()
    worker = CaptureWorker(settings, ov_transport=fake.transport(), burst=True, consumer="backlog")
    forget = asyncio.create_task(forget_requests(fake))
    started = time.perf_counter()
    await worker.run()
    elapsed = time.perf_counter() - started
    forget.cancel()
    assert worker.stats.applied == events and worker.stats.dead_lettered == 0, worker.stats
    total_bytes = sum(len(p) for p in payloads)
    return {
        "seconds": elapsed,
        "events_s": events / elapsed,
        "mb_s": total_bytes / elapsed / 1e6,
        "event_kib": total_bytes / events / 1024,
        "gap_s": worker.stats.longest_renewal_gap_s,
        "lease_s": worker.lease_ms / 1000,
    }


async def forget_requests(fake: FakeOV) -> None:
    """Drop the fake's log of requests now and then: a real OV keeps them out of our process
    (left alone, the growing heap makes the garbage collector's pauses grow with it)."""
    while True:
        await asyncio.sleep(0.2)
        fake.calls.clear()
        fake.requests.clear()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=6000, help="turn events in the throughput runs")
    parser.add_argument("--sessions", type=int, default=200, help="sessions the turns spread over")
    parser.add_argument("--keep-turns", type=int, default=10, help="turns of transcript each event carries")
    parser.add_argument("--rate", type=float, default=200.0, help="turns per second in the latency run")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency run")
    parser.add_argument("--backlog-events", type=int, default=2000, help="afterTurn events in the backlog run")
    parser.add_argument("--backlog-kib", type=int, default=40, help="size of each backlog event")
    args = parser.parse_args()

    server = start_redis_server()
    url = server.url
    try:
        client = redis.Redis.from_url(url)
        settings = Settings(redis_url=url, key_prefix="bench", shards=4)
        events = workload(args.events, args.sessions, args.keep_turns)
        payloads = [(stream_of_event(settings, e), encode(e)) for e in events]
        raw_rate = bench_raw(client, settings, payloads)
        capture = uvloop.run(bench_capture(settings, client, events))
        client.flushall()
        latency_settings = settings.model_copy(update={"key_prefix": "latency"})
        latencies = uvloop.run(
            bench_latency(latency_settings, url, args.rate, args.seconds, args.sessions, args.keep_turns)
        )
        client.flushall()
        backlog_settings = settings.model_copy(update={"key_prefix": "backlog", "shards": 1})
        backlog = uvloop.run(bench_backlog(backlog_settings, client, args.backlog_events, args.backlog_kib))
    finally:
        server.stop()

    size = statistics.mean(len(p) for _, p in payloads)
    rows = [
        ("raw redis-py XADD+XREADGROUP+XACK", f"{raw_rate:,.0f} entries/s", ""),
        (
            "capture worker (1), events",
            f"{capture['events_s']:,.0f} events/s",
            f"{capture['events_s'] / raw_rate:.1%} of raw",
        ),
        ("capture worker (1), messages", f"{capture['messages_s']:,.0f} messages/s", "target >= 2,000"),
        (
            "  OV batch writes / snapshots",
            f"{capture['ov_writes']:,} / {capture['snapshots']:,}",
            f"{args.events:,} events in {capture['seconds']:.2f}s",
        ),
    ]
    if latencies:
        rows += [
            (f"XADD -> snapshot at {args.rate:g} turns/s, p50", f"{pct(latencies, 0.50) * 1000:.1f} ms", ""),
            (
                f"XADD -> snapshot at {args.rate:g} turns/s, p99",
                f"{pct(latencies, 0.99) * 1000:.1f} ms",
                "target < 50 ms",
            ),
            (
                "  turns measured",
                f"{len(latencies):,} of {int(args.rate * args.seconds):,}",
                f"max {max(latencies) * 1000:.1f} ms",
            ),
        ]
    rows += [
        (
            f"backlog of {args.backlog_events:,} afterTurn x {backlog['event_kib']:.0f} KiB, 1 shard",
            f"{backlog['mb_s']:,.1f} MB/s",
            f"{backlog['events_s']:,.0f} events/s, {backlog['seconds']:.1f}s",
        ),
        (
            "  longest gap between lease renewals",
            f"{backlog['gap_s'] * 1000:,.0f} ms",
            f"lease {backlog['lease_s']:g}s: target < {backlog['lease_s'] / 3 * 1000:,.0f} ms (a third)",
        ),
    ]
    print(
        f"\novstream capture benchmark: {args.events:,} events over {args.sessions} sessions, "
        f"~{size:,.0f} B each ({args.keep_turns} turns of transcript), 4 shards, zero-latency FakeOV\n"
    )
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    for name, value, note in rows:
        print(f"  {name.ljust(width)}  {value.rjust(vwidth)}  {note}")


if __name__ == "__main__":
    main()
