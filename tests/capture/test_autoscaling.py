"""KEDA's triggers (deploy/k8s/keda.yaml) resolved against a live deployment: the commit
workers' on the jobs queued on every commit line; capture's before,
during and after ``ovstream reshard``: the RPC's ``/v1/scaling`` read as KEDA reads it (its
URL's path, the bearer token its TriggerAuthentication names, its ``valueLocation``), on a
real redis-server with real streams whose backlog moves; the replica count follows the
streams read now, so the cap follows the shard count with nothing in keda.yaml to change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from core.fairness import line_of
from core.scaling import CAPTURE_LAG_PER_REPLICA, COMMIT_JOBS_PER_WORKER
from tests.helpers.capture import make_worker, run_until, turn
from workers.commits.queue import commit_lines, commit_queue
from workers.status import read_backlog
from workers.store.shard_map import read_shard_map, reshard
from workers.store.streams import publish_turn

KEDA = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "keda.yaml"
TOKEN = "keda-reads-with-this-token-0123"


def _trigger(scaled: str = "ovstream-capture") -> dict[str, Any]:
    obj = next(d for d in yaml.safe_load_all(KEDA.read_text()) if d and d["metadata"]["name"] == scaled)
    [trigger] = obj["spec"]["triggers"]
    return trigger


def _value(body: Any, location: str) -> Any:
    """KEDA's GJSON path, as far as keda.yaml uses it (dotted keys)."""
    for key in location.split("."):
        body = body[key]
    return body


async def _keda_reads(rpc: Any, scaled: str = "ovstream-capture") -> tuple[int, dict[str, Any]]:
    """What KEDA's metrics-api scaler gets: the replica count at valueLocation, and the answer's
    part about what ``scaled`` runs."""
    trigger = _trigger(scaled)
    path = urlparse(trigger["metadata"]["url"]).path
    answer = await rpc.client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    value = _value(body, trigger["metadata"]["valueLocation"])
    assert isinstance(value, int)  # KEDA refuses anything but a number
    return value // int(trigger["metadata"]["targetValue"]), body[
        "capture" if scaled == "ovstream-capture" else "commits"
    ]


def _publish(redis_client: Any, settings: Any, sessions: list[str], turns: int) -> int:
    for index in range(turns):
        for session in sessions:
            publish_turn(redis_client, settings, turn(session, index))
    return len(sessions) * turns


async def test_kedas_capture_trigger_follows_the_backlog_and_a_reshard(redis_client, settings, fake_ov, make_rpc):
    rpc = await make_rpc(fake_ov, rpc_token=TOKEN, shards=settings.shards, key_prefix=settings.key_prefix)
    refused = await rpc.client.get(urlparse(_trigger()["metadata"]["url"]).path)
    assert refused.status_code == 401  # KEDA must come with the token its TriggerAuthentication names
    assert (await _keda_reads(rpc))[0] == 1  # nothing waiting: one process (never 0)

    sessions = [f"scale-{i}" for i in range(40)]
    published = _publish(redis_client, settings, sessions, 30)  # no capture running: it piles up
    replicas, capture = await _keda_reads(rpc)
    assert capture["backlog"] == published and capture["streams"] == settings.shards == 4
    assert published > 4 * CAPTURE_LAG_PER_REPLICA and replicas == 4  # capped at the streams

    reshard(redis_client, settings, 8)  # 4 -> 8: the old streams drain first, then the new ones
    published += _publish(redis_client, settings, sessions, 5)
    replicas, capture = await _keda_reads(rpc)
    assert capture["streams"] == 12 and replicas == min(12, -(-published // CAPTURE_LAG_PER_REPLICA))
    assert capture["backlog"] == published

    def drained() -> bool:
        backlog = sum((s.unread or 0) + s.pending for s in read_backlog(redis_client, settings))
        return backlog == 0 and read_shard_map(redis_client, settings).previous is None

    await run_until([make_worker(settings, fake_ov, consumer="drainer")], drained, timeout_s=120)
    replicas, capture = await _keda_reads(rpc)
    assert capture["streams"] == 8 and capture["backlog"] == 0 and replicas == 1  # drained, retired

    published = _publish(redis_client, settings, sessions, 60)  # into the new generation's streams
    replicas, capture = await _keda_reads(rpc)
    assert capture["backlog"] == published and published > 8 * CAPTURE_LAG_PER_REPLICA
    assert replicas == 8  # the cap followed the reshard: 8 streams now


async def test_kedas_worker_trigger_counts_the_jobs_on_every_line(redis_client, settings, fake_ov, make_rpc) -> None:
    rpc = await make_rpc(fake_ov, rpc_token=TOKEN, shards=settings.shards, key_prefix=settings.key_prefix)
    assert (await _keda_reads(rpc, "ovstream-worker"))[0] == 1  # nothing queued: one worker (never 0)
    lines = commit_lines(redis_client, settings)
    for i in range(3 * COMMIT_JOBS_PER_WORKER):  # three tenants' bursts, each on its own line
        lines.enqueue(line_of(f"tenant-{i % 3}", "threshold"), print, i)
    commit_queue(redis_client, settings).enqueue(print, "an earlier release's")  # the queue's own list
    replicas, commits = await _keda_reads(rpc, "ovstream-worker")
    assert commits["queued"] == 3 * COMMIT_JOBS_PER_WORKER + 1 and replicas == 4
