"""RQ jobs per commit: a lone commit, and one tenant's burst of commits. Prints figures; not a test.

Earlier releases ran one phase 2 per OV user at a time: a commit finding its tenant's lock
held scheduled itself again every ``commitTenantWaitS`` (about 4,030 RQ jobs for 100
commits), later it waited in the tenant's line with no job. Commits of one user now run side
by side (OV merges their phase 2s, docs/OV-NOTES.md): a burst costs what a lone commit does.

Starts a redis-server on a free loopback port, an in-memory FakeOV whose phase 2 answers
"running" to its first ``--phase2-reads`` task reads, and runs the commit jobs in this
process (burst rounds, as ``ovstream up`` and the tests do). Counts every RQ job created
(commits, phase-2 polls, extraction checks if any) and prints jobs per commit for a lone commit
and for ``--burst`` sessions of one tenant committing at once, and their ratio.

    .venv/bin/python bench/commit_jobs.py [--burst 50] [--phase2-reads 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from rq.job import Job

from core.config import Settings
from core.session import SessionAddress
from workers.commits import context as job_context
from workers.commits.api import FINAL_STATUSES, CommitRecords, request_commit
from workers.commits.worker import drain_jobs
from workers.dev.fake_ov.app import FakeOV
from workers.dev.local_redis import start_redis_server
from workers.store.connection import connect


class JobCount:
    """Every RQ job created while installed (``Job.create`` is where all of them start)."""

    def __init__(self) -> None:
        self.created = 0
        self._create = Job.create

    def __enter__(self) -> JobCount:
        create = self._create

        def counting(*args: Any, **kwargs: Any) -> Job:
            self.created += 1
            return create(*args, **kwargs)

        Job.create = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        Job.create = self._create  # type: ignore[method-assign]


def seed(fake: FakeOV, sid: str) -> None:
    client = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov")
    msgs = [{"role": "user", "content": f"{sid} says hello"}, {"role": "assistant", "content": "hi"}]
    client.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": msgs}).raise_for_status()


def jobs_per_commit(settings: Settings, fake: FakeOV, sessions: list[str]) -> tuple[float, float]:
    """(RQ jobs per commit, seconds) for ``sessions`` all asking for a commit at once."""
    redis = connect(settings)
    for sid in sessions:
        seed(fake, sid)
    started = time.perf_counter()
    with JobCount() as count:
        requests = [
            request_commit(redis, settings, SessionAddress(sid, "main"), reason="compact", keep_recent_count=0)
            for sid in sessions
        ]
        records = CommitRecords(redis, settings)

        def final() -> bool:
            return all((o := records.outcome(r)) is not None and o.status in FINAL_STATUSES for r in requests)

        if not drain_jobs(redis, settings, until=final, timeout_s=600, pause_s=0.005):
            raise SystemExit("the commits did not finish within 600 s")
    statuses = {records.outcome(r).status for r in requests}  # type: ignore[union-attr]
    if statuses != {"completed"}:
        raise SystemExit(f"commits ended {statuses}")
    return count.created / len(sessions), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=50, help="sessions of one tenant committing at once")
    parser.add_argument("--phase2-reads", type=int, default=3, help="task reads answering 'running' first")
    args = parser.parse_args()
    server = start_redis_server()
    fake = FakeOV()
    fake.phase2_reads_until_done = args.phase2_reads
    transport = fake.transport()
    job_context.set_ov_transport_factory(lambda _s: transport)
    try:
        settings = Settings(redis_url=server.url, phase2_poll_interval_s=0.01)
        job_context.register(settings)
        lone, lone_s = jobs_per_commit(settings, fake, ["lone"])
        burst, burst_s = jobs_per_commit(settings, fake, [f"burst-{i:03d}" for i in range(args.burst)])
    finally:
        job_context.set_ov_transport_factory(None)
        server.stop()
    print(f"RQ jobs per commit, phase 2 answering 'running' to its first {args.phase2_reads} reads:")
    print(f"  a lone commit                               {lone:6.2f} jobs/commit  ({lone_s:.2f} s)")
    print(f"  {args.burst} commits of one tenant at once          {burst:6.2f} jobs/commit  ({burst_s:.2f} s)")
    print(f"  burst / lone                                {burst / lone:6.2f}x  (target 1.00: no job waits)")


if __name__ == "__main__":
    main()
