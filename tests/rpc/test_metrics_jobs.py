"""A commit queue job that failed after its retries is counted in ``/metrics``
(``ovstream_commit_jobs{state="failed"}``, which ``OvstreamCommitJobsFailed`` alerts on) and
in ``ovstream status``, the same number."""

from __future__ import annotations

from typing import Any

import pytest
from rq.job import JobStatus

from workers.commits.queue import commit_queue
from workers.status import read_status

pytestmark = pytest.mark.redis


async def test_a_failed_commit_job_is_counted_in_metrics_and_status(rpc: Any) -> None:
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, 'ovstream_commit_jobs{state="failed"}') == 0.0
    queue = commit_queue(rpc.redis, rpc.settings)
    job = queue.enqueue("workers.commits.repair.check_extraction", "{}", rpc.settings.key_prefix, job_id="given-up")
    queue.remove(job)
    job.set_status(JobStatus.FAILED)
    queue.failed_job_registry.add(job, ttl=60)
    metrics = (await rpc.client.get("/metrics")).text
    assert rpc.metric(metrics, 'ovstream_commit_jobs{state="failed"}') == 1.0
    assert rpc.metric(metrics, 'ovstream_commit_jobs{state="queued"}') == 0.0
    assert read_status(rpc.redis, rpc.settings).commit_jobs["failed"] == 1
