"""The README's "Deploying across machines", run as it says on loopback: TLS to Redis
(client certificates required), OV behind an HTTPS endpoint with a private CA, the RPC
serving HTTPS on every interface with a token read from a file, and ``ovstream rpc``,
``ovstream capture`` and ``ovstream worker`` as separate processes configured only by
``OVSTREAM_*``. A full round goes through: turns published to the TLS Redis are captured
into the real OV, assemble returns them, compact commits and waits for phase 2. Without the
token the RPC answers 401; no process logs a secret."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.chaos import Deployment
from tests.helpers.e2e import Conversation, first_text, unique, wait_for
from tests.helpers.tls import Pki, TlsProxy, TlsRedis
from workers.dev.local_redis import free_port
from workers.status import read_backlog
from workers.store.streams import publish_turn

TOKEN = "rpc-token-for-the-deploy-test-0123456789"


@pytest.fixture(scope="module")
def https_ov(pki: Pki, ov_server: Any) -> Iterator[TlsProxy]:
    proxy = TlsProxy(pki, int(ov_server.url.rsplit(":", 1)[1]))
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def deployment(
    pki: Pki, tls_redis: TlsRedis, https_ov: TlsProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("deploy")
    token_file = workdir / "rpc-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    values = {
        "base_url": https_ov.url,
        "ov_ca_file": pki.ca_file,
        "redis_url": tls_redis.url,
        "redis_ca_file": pki.ca_file,
        "redis_cert_file": pki.client_cert,
        "redis_key_file": pki.client_key,
        "rpc_host": "0.0.0.0",
        "rpc_port": port,
        "rpc_tls_cert_file": pki.server_cert,
        "rpc_tls_key_file": pki.server_key,
        "key_prefix": unique("deploy"),
        "shards": 2,
        "capture_block_ms": 200,
        "phase2_poll_interval_s": 0.3,
        "compact_wait_s": 120.0,
    }
    deploy = Deployment(values, Path(workdir))
    deploy.env["OVSTREAM_RPC_TOKEN_FILE"] = str(token_file)
    for name in ("rpc", "capture", "worker"):
        deploy.start(name)
    try:
        with _rpc(port, pki) as http:
            wait_for(lambda: _healthy(http), "the RPC answering /healthz over HTTPS", timeout_s=60)
        yield deploy
    finally:
        deploy.stop()


def _rpc(port: int, pki: Pki, token: str | None = TOKEN) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    verify = ssl.create_default_context(cafile=pki.ca_file)
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=verify, headers=headers, timeout=150)


def _healthy(http: httpx.Client) -> bool:
    try:
        r = http.get("/healthz")
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and r.json()["status"] == "ok"


def test_a_round_over_tls_with_tokens(deployment: Deployment, tls_redis: TlsRedis, pki: Pki) -> None:
    assert deployment.exited() == {}, deployment.log("rpc")
    port = deployment.settings.rpc_port
    conv = Conversation(unique("tls"))
    client = tls_redis.client()
    try:
        for i in range(3):
            publish_turn(client, deployment.settings, conv.turn(f"question {i} over TLS", f"answer {i} over TLS"))
        caught_up = lambda: all(s.oldest_unapplied is None for s in read_backlog(client, deployment.settings))  # noqa: E731
        wait_for(caught_up, "capture applying the turns published over TLS")
    finally:
        client.close()
    with _rpc(port, pki) as http:
        # No messages of the caller's: whatever comes back was read from OV through the snapshot.
        body = {**conv.ref, "messages": [], "prompt": "next", "availableTools": []}
        answer = http.post("/v1/assemble", json=body).json()
        texts = [first_text(m) for m in answer["messages"]]
        assert [t for t in texts if "over TLS" in t] == [
            f"{kind} {i} over TLS" for i in range(3) for kind in ("question", "answer")
        ], answer
        compacted = http.post("/v1/compact", json={**conv.ref, "force": True})
        assert compacted.status_code == 200, compacted.text
        assert compacted.json()["ok"] is True and compacted.json()["compacted"] is True, compacted.text
    with _rpc(port, pki, token=None) as anonymous:
        refused = anonymous.post("/v1/assemble", json=body)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        assert anonymous.get("/healthz").status_code == 200
    for name in ("rpc", "capture", "worker"):
        log = deployment.log(name, lines=100_000)
        assert TOKEN not in log and Path(pki.client_key).read_text() not in log, name
        assert "Traceback" not in log, log
