"""The plugin says its release (``X-Ovstream-Plugin``): a plugin older than the service
supports is refused with what to do (426), a header that is no version with 400, on the
assemble lane and on FastAPI's routes alike, after the token check; the versions that talk
reach ``ovstream status`` through the RPC's health record."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from core import defaults
from tests.helpers.served import served
from tests.helpers.waiting import wait_until
from workers.cli.status import format_status
from workers.rpc.plugins import UNVERSIONED
from workers.status import read_status
from workers.version import installed_version

pytestmark = pytest.mark.redis

CALLS = [
    ("/v1/assemble", {"sessionId": "s-plugin", "messages": []}),  # the lane ahead of FastAPI
    ("/v1/tools/memory_recall", {"params": {"query": "anything at all"}}),
    ("/v1/compact", {"sessionId": "s-plugin"}),
]
TOKEN = "token-of-the-operator-0123"


@pytest.mark.parametrize(("path", "body"), CALLS, ids=[p for p, _ in CALLS])
@pytest.mark.parametrize(
    ("sent", "status", "code"),
    [
        ("0.0.9", 426, "plugin_too_old"),
        ("0.0.1-rc.1", 426, "plugin_too_old"),
        ("banana", 400, "plugin_version_invalid"),
        ("1.2", 400, "plugin_version_invalid"),
    ],
)
async def test_a_plugin_too_old_or_unreadable_is_refused_with_what_to_do(
    rpc: Any, path: str, body: dict, sent: str, status: int, code: str
) -> None:
    r = await rpc.client.post(path, json=body, headers={"X-Ovstream-Plugin": sent})
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    if status == 426:
        assert defaults.MIN_PLUGIN_VERSION in error["message"] and "upgrade the plugin" in error["message"]


@pytest.mark.parametrize(("path", "body"), CALLS, ids=[p for p, _ in CALLS])
@pytest.mark.parametrize("sent", [installed_version(), defaults.MIN_PLUGIN_VERSION, "9.0.0", None])
async def test_a_supported_plugin_or_none_is_served(rpc: Any, path: str, body: dict, sent: str | None) -> None:
    headers = {} if sent is None else {"X-Ovstream-Plugin": sent}
    r = await rpc.client.post(path, json=body, headers=headers)
    assert r.status_code not in (400, 426), r.text


async def test_the_token_is_checked_before_the_version(make_rpc: Any, fake: Any) -> None:
    rpc = await make_rpc(fake, rpc_token=TOKEN)
    r = await rpc.client.post("/v1/assemble", json=CALLS[0][1], headers={"X-Ovstream-Plugin": "0.0.1"})
    assert r.status_code == 401  # a caller without a token learns nothing of the service's versions


async def test_status_says_which_plugins_talk_and_which_releases_run(make_rpc: Any, fake: Any) -> None:
    # No traces: the served app runs on a loop of its own, and the test's Redis client (made on
    # this one) must not be used from it (the traces would write through it).
    rpc = await make_rpc(fake, console_trace_ttl_s=0)
    with served(rpc.app) as port:  # served: the app's lifespan runs its health beat

        def post(headers: dict[str, str]) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(
                "POST", "/v1/assemble", json.dumps(CALLS[0][1]), {"content-type": "application/json", **headers}
            )
            status = conn.getresponse().status
            conn.close()
            return status

        assert post({"X-Ovstream-Plugin": "0.2.7"}) == 200
        assert post({}) == 200  # a plugin from before 0.3.0 says nothing
        assert post({"X-Ovstream-Plugin": "0.0.2"}) == 426  # refused: not one that talks
        status = wait_until(  # a beat between the two calls says the first alone: the next says both
            lambda: (s := read_status(rpc.redis, rpc.settings)).plugins == ["0.2.7", UNVERSIONED] and s,
            "the RPC's beat with both plugins",
        )
    assert status.plugins == ["0.2.7", UNVERSIONED]
    assert status.releases == {installed_version(): 1}
    said = format_status(status)
    assert f"plugins talking: 0.2.7, {UNVERSIONED}" in said and f"releases running: {installed_version()}" in said
    assert f"version={installed_version()}" in said  # the process's own line says its release
