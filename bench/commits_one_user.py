"""Commits of one OV user: side by side (this tree) against one after another (the tenant line
earlier releases kept), on the real openviking-server 0.5.2 and the dev model server.

Prints figures; not a test. Starts a redis-server, the bundled model server and a local
openviking-server on free loopback ports, and runs ovstream's commit jobs in this process (an
RQ worker on a thread). For each N it seeds N sessions of one OV user, each holding one
preference of a topic of its own (one memory expected per session), then:

- side by side: asks for all N commits at once (``request_commit``), as capture does when
  N agents of one user cross the threshold together; the time until the last is final;
- serialized: the same for N fresh sessions, each commit asked for once the one before is
  final: what one tenant's line cost (OV's 10 s batch window waited out alone each time).

Memories written are counted by reading each expected memory file back from OV, and the
lost extractions ovstream found (``read_lost_extractions``) are printed too.

    .venv/bin/python bench/commits_one_user.py [--counts 1 5 20]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import redis  # noqa: E402

from core.config import Settings  # noqa: E402
from core.events import CommitRequest  # noqa: E402
from core.session import SessionAddress  # noqa: E402
from workers.commits.context import context_of  # noqa: E402
from workers.commits.records import FINAL_STATUSES, CommitRecords  # noqa: E402
from workers.commits.repair import read_lost_extractions  # noqa: E402
from workers.commits.request import request_commit  # noqa: E402
from workers.commits.worker import drain_jobs  # noqa: E402
from workers.dev.demo_services import start_local_stack  # noqa: E402
from workers.dev.local_redis import start_redis_server  # noqa: E402

USER = "bench-one-user"
HEADERS = {"X-OpenViking-Account": "default", "X-OpenViking-User": USER}
WAIT_S = 900.0


def seed(ov: httpx.Client, count: int) -> list[tuple[str, str]]:
    """``count`` sessions, one preference each: [(session id, the memory file it makes)]."""
    made = []
    for _ in range(count):
        word = "w" + uuid.uuid4().hex[:10]
        sid = f"bench-{word}"
        messages = [
            {"role": "user", "parts": [{"type": "text", "text": f"I prefer {word} tea in the morning."}]},
            {"role": "assistant", "parts": [{"type": "text", "text": "Noted."}]},
        ]
        ov.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": messages}).raise_for_status()
        made.append((sid, f"viking://user/{USER}/memories/preferences/default/{word}_tea_morning.md"))
    return made


def ask(redis_client, settings: Settings, sid: str) -> CommitRequest:  # type: ignore[no-untyped-def]
    address = SessionAddress(sid, "main", None)
    return request_commit(redis_client, settings, address, reason="manual", keep_recent_count=0)


def wait_final(redis_client, settings: Settings, requests: list[CommitRequest]) -> None:  # type: ignore[no-untyped-def]
    records, deadline = CommitRecords(redis_client, settings), time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        outcomes = [records.outcome(r) for r in requests]
        if all(o is not None and o.status in FINAL_STATUSES for o in outcomes):
            return
        time.sleep(0.1)
    raise SystemExit(f"commits not final within {WAIT_S:g} s")


def written(ov: httpx.Client, seeded: list[tuple[str, str]]) -> int:
    found = 0
    for _, uri in seeded:
        r = ov.get("/api/v1/content/read", params={"uri": uri})
        found += r.status_code == 200 and "tea in the morning" in str(r.json().get("result"))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 5, 20])
    args = parser.parse_args()
    with ExitStack() as stack:
        redis_server = start_redis_server()
        stack.callback(redis_server.stop)
        ov_url = start_local_stack(stack, lambda line: print(line, flush=True))
        settings = Settings(
            base_url=ov_url, redis_url=redis_server.url, user=USER, phase2_poll_interval_s=0.3, phase2_deadline_s=600
        )
        context_of(settings)
        redis_client = redis.Redis.from_url(redis_server.url)
        done = threading.Event()
        worker = threading.Thread(
            target=drain_jobs, args=(redis_client, settings), kwargs={"until": done.is_set, "timeout_s": 10**6}
        )
        worker.start()
        stack.callback(worker.join)
        stack.callback(done.set)
        ov = stack.enter_context(httpx.Client(base_url=ov_url, headers=HEADERS, timeout=60, trust_env=False))
        print(f"{'N':>3}  {'side by side':>13}  {'memories':>9}  {'serialized':>11}  {'memories':>9}  {'ratio':>6}")
        for n in args.counts:
            together = seed(ov, n)
            started = time.monotonic()
            wait_final(redis_client, settings, [ask(redis_client, settings, sid) for sid, _ in together])
            side_s = time.monotonic() - started
            side_found = written(ov, together)
            chain = seed(ov, n)
            started = time.monotonic()
            for sid, _ in chain:
                wait_final(redis_client, settings, [ask(redis_client, settings, sid)])
            chain_s = time.monotonic() - started
            chain_found = written(ov, chain)
            print(
                f"{n:>3}  {side_s:>11.1f} s  {side_found:>4}/{n:<4}  {chain_s:>9.1f} s  {chain_found:>4}/{n:<4}"
                f"  {chain_s / side_s:>5.2f}x",
                flush=True,
            )
        lost = read_lost_extractions(redis_client, settings)
        print(f"extractions ovstream found lost: {lost.lost_total}; their repairs: {lost.repairs or 'none'}")


if __name__ == "__main__":
    main()
