"""Usage per tenant (issue 58): counted where the work happens (the RPC's calls, capture's
writes, the commits and OV's requests), added to the hour's and the day's bucket, and served
by ``GET /v1/usage`` to each credential for its own tenants only, by ``/metrics`` for the
busiest tenants and the rest as one series, and by ``ovstream usage``. Real redis-server, the
fake OV in API-key mode."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from core.events import TurnEvent
from core.session import SessionAddress
from core.usage import OTHER_TENANTS, OWN_USER
from tests.helpers.capture import make_worker, publish, turn
from tests.helpers.rpc import running_worker
from tests.helpers.waiting import wait_until
from workers.cli.usage import cli_usage
from workers.commits.api import FINAL_STATUSES, CommitRecords, request_commit
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.auth import CONSOLE_COOKIE
from workers.store.usage import TALLY, flush, read_usage

pytestmark = pytest.mark.redis

KEYS = {"alice": "key-alice-0123456789", "bob": "key-bob-0123456789ab"}
SERVICE_KEY = "key-service-0123456789"
ALICE_TOKEN, BOB_TOKEN, OPS_TOKEN = "alice-token-0123456789", "bob-token-0123456789ab", "ops-token-0123456789ab"
CREDENTIALS = {
    "alice": {"token": ALICE_TOKEN, "ovKeys": [KEYS["alice"]]},
    "bob": {"token": BOB_TOKEN, "ovKeys": [KEYS["bob"]]},
    "ops": {"token": OPS_TOKEN},  # acts as the service: sees every tenant
}


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _today(rpc: Any) -> dict[str, dict[str, int]]:
    [today] = read_usage(rpc.redis, rpc.settings, "day", 1).values()
    return today


async def test_each_tenant_is_counted_and_each_credential_reads_its_own(make_rpc: Any) -> None:
    fake = FakeOV(api_keys={key: ("acct", user) for user, key in KEYS.items()})
    rpc = await make_rpc(fake, user_api_keys=dict(KEYS), rpc_credentials=CREDENTIALS, usage_metrics_tenants=1)
    TALLY.take()  # what earlier tests in this process counted and never flushed
    for user, n in (("alice", 3), ("bob", 1)):
        for i in range(n):
            body = {"sessionId": f"{user}-s", "messages": [{"role": "user", "content": f"{user} asks question {i}"}]}
            assert (await rpc.assemble(body, **_bearer(CREDENTIALS[user]["token"]))).status_code == 200
    recall = {"sessionId": "bob-s", "params": {"query": "what does bob like"}}
    assert (await rpc.tool("memory_recall", recall, **_bearer(BOB_TOKEN))).status_code == 200
    flush(rpc.redis, rpc.settings)

    today = _today(rpc)
    assert today["alice"]["assembles"] == 3 and today["bob"]["assembles"] == 1
    assert today["bob"]["tool_calls"] == 1 and "tool_calls" not in today["alice"]
    assert today["bob"]["ov_requests"] >= 1  # the recall's search, asked as bob

    as_alice = await rpc.client.get("/v1/usage", params={"period": "hour", "buckets": 2}, headers=_bearer(ALICE_TOKEN))
    assert as_alice.status_code == 200, as_alice.text
    answer = as_alice.json()
    assert set(answer["total"]) == {"alice"} and answer["total"]["alice"]["assembles"] == 3
    assert len(answer["buckets"]) == 2 and answer["counts"]["assembles"]
    # another tenant's, asked for by name: nothing
    peek = await rpc.client.get("/v1/usage", params={"tenant": "bob"}, headers=_bearer(ALICE_TOKEN))
    assert peek.status_code == 200 and peek.json()["total"] == {}
    everyone = (await rpc.client.get("/v1/usage", headers=_bearer(OPS_TOKEN))).json()["total"]
    assert {"alice", "bob"} <= set(everyone)
    for bad in ({"period": "week"}, {"buckets": 0}, {"buckets": 100_000}):
        refused = await rpc.client.get("/v1/usage", params=bad, headers=_bearer(OPS_TOKEN))
        assert refused.status_code == 422, (bad, refused.text)
    assert (await rpc.client.get("/v1/usage")).status_code == 401

    # the console's page: each tenant the credential sees, with its chart
    page = await rpc.client.get("/console/usage", headers={"cookie": f"{CONSOLE_COOKIE}={ALICE_TOKEN}"})
    assert page.status_code == 200 and 'data-tenant="alice"' in page.text and 'data-tenant="bob"' not in page.text
    bars = page.text.split('class="usage"')[1:]
    assert len(bars) == 14 and 'data-value="0"' in bars[0]  # a bar a day, today's last
    assert f'data-value="{today["alice"]["ov_requests"]}"' in bars[-1]
    ops_page = await rpc.client.get("/console/usage?period=hour", headers={"cookie": f"{CONSOLE_COOKIE}={OPS_TOKEN}"})
    assert 'data-tenant="alice"' in ops_page.text and 'data-tenant="bob"' in ops_page.text

    # /metrics: the busiest tenant by name (usageMetricsTenants=1), the rest as one series
    metrics = (await rpc.client.get("/metrics", headers=_bearer(OPS_TOKEN))).text
    named = [line for line in metrics.splitlines() if line.startswith("ovstream_tenant_usage_today{")]
    tenants = {line.split('tenant="')[1].split('"')[0] for line in named}
    busiest = max(today, key=lambda t: today[t].get("ov_requests", 0))
    assert tenants == {busiest, OTHER_TENANTS}, named
    rest = sum(c.get("assembles", 0) for t, c in today.items() if t != busiest)
    assert rpc.metric(metrics, f'ovstream_tenant_usage_today{{count="assembles",tenant="{OTHER_TENANTS}"}}') == rest


async def test_capture_and_commits_count_what_they_wrote(make_rpc: Any, capsys: Any) -> None:
    keys = {**KEYS, "service": SERVICE_KEY}  # the turns of no tenant are written with the service's key
    fake = FakeOV(api_keys={key: ("acct", user) for user, key in keys.items()})
    rpc = await make_rpc(fake, user_api_keys=dict(KEYS), api_key=SERVICE_KEY)
    TALLY.take()
    events: list[TurnEvent] = [turn("alice-chat", i, user="alice") for i in range(3)] + [turn("own-chat", 0)]
    publish(rpc.redis, rpc.settings, events)
    await make_worker(rpc.settings, fake, burst=True).run()
    with running_worker(rpc):
        request = request_commit(
            rpc.redis, rpc.settings, SessionAddress("alice-chat", "main", "alice"), reason="manual", keep_recent_count=0
        )
        records = CommitRecords(rpc.redis, rpc.settings)

        def final() -> bool:
            outcome = records.outcome(request)
            return outcome is not None and outcome.status in FINAL_STATUSES

        wait_until(final, "alice's commit final")
    flush(rpc.redis, rpc.settings)
    today = _today(rpc)
    assert today["alice"]["turns_captured"] == 3 and today["alice"]["messages_captured"] == 6
    assert today["alice"]["tokens_captured"] > 0
    assert today[OWN_USER]["turns_captured"] == 1 and today[OWN_USER]["messages_captured"] == 2
    assert today["alice"]["commits"] == 1 and today["alice"]["commits_completed"] == 1
    assert today["alice"]["ov_requests"] >= 2  # the commit, and its phase 2 read (as alice's key)

    code = cli_usage(rpc.settings, argparse.Namespace(period="day", buckets=1, tenant=None, json=False))
    out = capsys.readouterr().out
    assert code == 0 and "alice" in out and OWN_USER in out.split("\n", 2)[2]
