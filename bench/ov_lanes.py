"""The worker's async OV calls (a repair's, on its event loop; the commit jobs' and the
poller's are sync now: bench/ov_call_cost.py) with one connection pool, and with one pool per
lane of work (workers.commits.context.OV_LANES): CPU per call of eight threads reading side by
side, as a worker's poller did, against the fake OV over HTTP. Prints both and their ratio,
measured in one run; not a test.

    .venv/bin/python bench/ov_lanes.py [--batches 150] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import OVSTREAM, ovstream_env, spawn, stop, wait_http, work_dir  # bench/processes.py

from core.config import Settings
from core.session import SessionAddress
from workers.commits import context
from workers.commits.poller import POLL_THREADS, side_by_side
from workers.dev.local_redis import free_port

BATCH = 12
"""Reads a batch: more than the poller's threads, as a busy worker's batches are."""


def cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def per_call_ms(ov_url: str, lanes: int, batches: int) -> float:
    context.OV_LANES = lanes
    ctx = context.JobContext(Settings(base_url=ov_url, redis_url="fakeredis://"))
    address = SessionAddress("s", "main", None)

    def read(_: int) -> None:
        ctx.run(lambda: ctx.ov(address).health())

    try:
        side_by_side(read, list(range(64)), POLL_THREADS)  # every lane's connections made
        started = cpu_s()
        for _ in range(batches):
            side_by_side(read, list(range(BATCH)), POLL_THREADS)
        return (cpu_s() - started) / (batches * BATCH) * 1000
    finally:
        ctx.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    port, lanes = free_port(), context.OV_LANES
    ov = spawn([*OVSTREAM, "fake-ov", "--port", str(port)], ovstream_env(), work_dir("ov-lanes") / "ov.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 30)
        for _ in range(args.rounds):
            one = per_call_ms(f"http://127.0.0.1:{port}", 1, args.batches)
            each = per_call_ms(f"http://127.0.0.1:{port}", lanes, args.batches)
            print(
                f"CPU per OV call, {POLL_THREADS} threads: one pool {one:.3f} ms, a pool per lane {each:.3f} ms"
                f" ({each / one:.2f}x)"
            )
    finally:
        context.OV_LANES = lanes
        stop(ov)


if __name__ == "__main__":
    main()
