"""What publishReplicas costs a publish: p50/p99 with 0 and 1 replicas. Prints figures; not a test.

Starts a redis-server master and a replica following it on free loopback ports, then
publishes ``--turns`` turns (``publish_turn``, the same script and WAIT as the plugin's
publisher sends) with ``publish_replicas`` 0 and 1, alternating in blocks so both see the same
machine, and prints each one's p50/p99 and their ratio. With 1 a publish returns only once
the replica holds the turn (Redis WAIT); with 0 once the master does.

    .venv/bin/python bench/publish_replicas.py [--turns 4000] [--block 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import Settings
from core.events import TurnEvent
from workers.dev.local_redis import follow, start_redis_server
from workers.store.connection import connect
from workers.store.streams import publish_turn


def _turn(n: int) -> TurnEvent:
    text = f"turn {n}: " + "word " * 200
    return TurnEvent(
        event_id=f"e{n}",
        session_id=f"bench-{n % 50}",
        messages=[
            {"role": "user", "content": text},
            {"role": "assistant", "content": [{"type": "text", "text": text}]},
        ],
        pre_prompt_message_count=0,
        published_at=time.time(),
    )


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=4000, help="turns per setting")
    parser.add_argument("--block", type=int, default=200, help="turns in a row with one setting")
    args = parser.parse_args()
    master, replica = start_redis_server(), start_redis_server()
    try:
        follow(replica, master)
        base = Settings(redis_url=master.url, key_prefix="benchrep", shards=4)
        settings = {n: base.model_copy(update={"publish_replicas": n}) for n in (0, 1)}
        client = connect(base)
        timings: dict[int, list[float]] = {0: [], 1: []}
        n = 0
        while len(timings[1]) < args.turns:
            for replicas in (0, 1):
                for _ in range(args.block):
                    event = _turn(n)
                    n += 1
                    started = time.perf_counter()
                    publish_turn(client, settings[replicas], event)
                    timings[replicas].append((time.perf_counter() - started) * 1000)
        client.close()
        print(f"publish_turn, {args.turns} turns each (~2 KB), master + 1 replica on loopback, blocks of {args.block}")
        print(f"{'publish_replicas':<18}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
        for replicas, values in timings.items():
            p50, p99 = _percentile(values, 50), _percentile(values, 99)
            print(f"{replicas:<18}{p50:>9.3f}{p99:>9.3f}{statistics.fmean(values):>9.3f}")
        ratio50 = _percentile(timings[1], 50) / _percentile(timings[0], 50)
        ratio99 = _percentile(timings[1], 99) / _percentile(timings[0], 99)
        print(f"1 replica against 0: p50 {ratio50:.2f}x, p99 {ratio99:.2f}x the time")
    finally:
        replica.stop()
        master.stop()


if __name__ == "__main__":
    main()
