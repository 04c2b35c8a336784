"""CPU of one OV call as the commit jobs make it, three ways, measured in one run against the
fake OV over HTTP (no latency): through an ``httpx.AsyncClient`` on the jobs' event loop (the
OV client before it sent through its transport), through the async ``OVClient`` on that loop
(``JobContext.run``: a hop to the loop and back), and through the sync ``OVSyncClient`` on the
caller's thread (``JobContext.ov_sync``). One thread, then eight side by side (the poller's
reads). Prints milliseconds a call and each way's ratio to the first; not a test.

    .venv/bin/python bench/ov_call_cost.py [--calls 2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from processes import OVSTREAM, ovstream_env, spawn, stop, wait_http, work_dir  # bench/processes.py

from core.config import Settings
from core.ov import calls
from core.session import SessionAddress
from workers.commits.context import JobContext, lane
from workers.commits.poller import POLL_THREADS, side_by_side
from workers.dev.local_redis import free_port

ADDRESS = SessionAddress("bench", "main", None)


def cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def per_call_ms(call: Callable[[], object], n: int, threads: int) -> float:
    def one(i: int) -> None:
        with lane(i):
            call()

    side_by_side(one, list(range(POLL_THREADS)), threads)  # every lane's connections made
    started = cpu_s()
    if threads == 1:
        for _ in range(n):
            call()
    else:
        side_by_side(one, list(range(n)), threads)
    return (cpu_s() - started) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ov = spawn([*OVSTREAM, "fake-ov", "--port", str(port)], ovstream_env(), work_dir("ov-call-cost") / "ov.log")
    ctx = JobContext(Settings(base_url=url, redis_url="fakeredis://"))
    try:
        wait_http(f"{url}/health", 30)
        ctx.ov_sync(ADDRESS).send(calls.get_session(ADDRESS.ov_session_id, auto_create=True))
        path = f"/api/v1/sessions/{ADDRESS.ov_session_id}"
        headers = ctx.ov_sync(ADDRESS).headers
        before = httpx.AsyncClient(base_url=url, trust_env=False)  # as the client was built

        async def old_way() -> object:
            return (await before.get(path, headers=headers)).json()

        ways: dict[str, Callable[[], object]] = {
            "httpx.AsyncClient via the jobs' loop (before)": lambda: ctx.run(old_way),
            "OVClient via the jobs' loop": lambda: ctx.run(lambda: ctx.ov(ADDRESS).get_session(ADDRESS.ov_session_id)),
            "OVSyncClient on the thread": lambda: ctx.ov_sync(ADDRESS).get_session(ADDRESS.ov_session_id),
        }
        for _ in range(args.rounds):
            for threads in (1, POLL_THREADS):
                ms = {name: per_call_ms(way, args.calls, threads) for name, way in ways.items()}
                first = next(iter(ms.values()))
                said = ", ".join(f"{name} {v:.3f} ms ({v / first:.2f}x)" for name, v in ms.items())
                print(f"CPU per OV call, {threads} thread(s): {said}")
        ctx.run(before.aclose)
    finally:
        ctx.close()
        stop(ov)


if __name__ == "__main__":
    main()
