"""RPC credentials: 401 without a token on every route but /healthz, the refusal to listen
beyond loopback without one, and each credential's OV identity: a caller with credential A
cannot read, change or forget what credential B's user has, through any route or tool."""

from __future__ import annotations

import http.client
import logging
from typing import Any

import pytest

from core.config import Settings
from tests.helpers.served import served
from tests.rpc.test_assemble import oc_turns, ov_turns
from workers.cli import main
from workers.dev.fake_ov.app import FakeOV
from workers.logs import configure, credential_name, redact
from workers.rpc.auth import exposure_problem
from workers.rpc.tools.registry import tools

pytestmark = pytest.mark.redis

TOKEN_A = "token-of-alice-0123456789"
TOKEN_B = "token-of-bob-0123456789ab"
TOKEN_ADMIN = "token-of-the-operator-0123"
KEY_A, KEY_B = "ov-key-alice", "ov-key-bob"
CREDENTIALS = {
    "alice": {"token": TOKEN_A, "ovKeys": [KEY_A]},
    "bob": {"token": TOKEN_B, "ovKeys": [KEY_B]},
    "ops": {"token": TOKEN_ADMIN},
}
ROUTES = [
    ("POST", "/v1/assemble", {"sessionId": "s", "messages": []}),
    ("POST", "/v1/compact", {"sessionId": "s"}),
    ("GET", "/v1/tools", None),
    *[("POST", f"/v1/tools/{name}", {"params": {}}) for name in sorted(tools())],
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def fake() -> FakeOV:
    return FakeOV(api_keys={KEY_A: ("acme", "alice"), KEY_B: ("acme", "bob")})


@pytest.fixture
async def rpc(make_rpc: Any, fake: FakeOV) -> Any:
    return await make_rpc(fake, rpc_credentials=CREDENTIALS)


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
@pytest.mark.parametrize("headers", [{}, bearer("not-a-token-at-all-xx"), {"X-Ovstream-Token": TOKEN_A[:-1]}])
async def test_every_route_but_healthz_needs_a_token(
    rpc: Any, method: str, path: str, body: Any, headers: dict
) -> None:
    r = await rpc.client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized" and r.headers["www-authenticate"].startswith("Bearer")
    ok = await rpc.client.request(method, path, json=body, headers=bearer(TOKEN_ADMIN))
    assert ok.status_code != 401


async def test_healthz_is_open_and_refusals_are_counted(rpc: Any) -> None:
    assert (await rpc.client.get("/healthz")).status_code == 200
    await rpc.client.get("/v1/tools")
    await rpc.client.get("/v1/tools", headers=bearer("wrong-token-wrong-token"))
    metrics = (await rpc.client.get("/metrics", headers={"X-Ovstream-Token": TOKEN_ADMIN})).text
    assert rpc.metric(metrics, 'ovstream_rpc_unauthorized_total{reason="missing"}') == 1.0
    assert rpc.metric(metrics, 'ovstream_rpc_unauthorized_total{reason="wrong"}') == 1.0
    assert TOKEN_ADMIN not in metrics and KEY_A not in metrics


@pytest.mark.parametrize(
    ("host", "settings", "refused"),
    [
        ("127.0.0.1", {}, False),
        ("::1", {}, False),
        ("localhost", {}, False),
        ("0.0.0.0", {}, True),
        ("10.1.2.3", {}, True),
        ("0.0.0.0", {"rpc_token": TOKEN_A}, False),
        ("0.0.0.0", {"rpc_allow_unauthenticated": True}, False),
    ],
)
def test_listening_beyond_loopback_needs_a_token(host: str, settings: dict, refused: bool) -> None:
    assert (exposure_problem(Settings(**settings), host) is not None) is refused


def test_the_rpc_refuses_to_start_on_a_network_address(monkeypatch: Any, caplog: Any) -> None:
    monkeypatch.setenv("OVSTREAM_RPC_HOST", "0.0.0.0")
    with caplog.at_level(logging.ERROR):
        assert main(["rpc"]) == 2
        assert main(["up", "--fake-ov"]) == 2
    assert "refusing to serve the RPC on 0.0.0.0 without authentication" in caplog.text


# --- each credential's OV identity ------------------------------------------------------------------


async def _seed_bob(rpc: Any, fake: FakeOV) -> str:
    await rpc.ov.scoped(api_key=KEY_B).add_messages("bobs-session", ov_turns("bob's secret plan", "noted, bob"))
    return fake.seed_memory("Bob's bank PIN hint is the dog's name.", account="acme", user="bob")


async def test_a_credential_acts_only_with_its_own_ov_key(rpc: Any, fake: FakeOV) -> None:
    await _seed_bob(rpc, fake)
    as_bob = {**bearer(TOKEN_A), "X-OpenViking-API-Key": KEY_B}
    r = await rpc.tool("memory_recall", {"params": {"query": "bank PIN"}}, **as_bob)
    assert r.status_code == 403 and r.json()["error"]["code"] == "ov_key_not_allowed"
    bob = await rpc.tool("memory_recall", {"params": {"query": "bank PIN hint dog"}}, **bearer(TOKEN_B))
    assert "PIN" in bob.json()["content"][0]["text"]  # bob's credential acts as bob without sending a key


async def test_alice_cannot_reach_bobs_data_through_any_route(rpc: Any, fake: FakeOV) -> None:
    memory = await _seed_bob(rpc, fake)
    alice = bearer(TOKEN_A)
    ref = {"sessionId": "bobs-session"}
    answers = [
        await rpc.assemble({**ref, "messages": oc_turns("hi"), "prompt": "what was the plan?"}, **alice),
        await rpc.assemble({**ref, "messages": oc_turns("what is bob's bank PIN hint?")}, **alice),
        await rpc.compact(ref, **alice),
        await rpc.tool("memory_recall", {**ref, "params": {"query": "bank PIN hint dog"}}, **alice),
        await rpc.tool("memory_search", {**ref, "params": {"query": "bank PIN hint dog"}}, **alice),
        await rpc.tool("memory_forget", {**ref, "params": {"uri": memory}}, **alice),
        await rpc.tool("memory_forget", {**ref, "params": {"query": "bank PIN hint dog"}}, **alice),
        await rpc.tool("ov_archive_search", {**ref, "params": {"query": "plan"}}, **alice),
        await rpc.tool("ov_archive_expand", {**ref, "params": {"archiveId": "archive_001"}}, **alice),
    ]
    for answer in answers:
        assert answer.status_code < 500, answer.text
        assert "bob's secret plan" not in answer.text and "PIN hint is" not in answer.text, answer.text
    assert [m.uri for m in fake.memories("acme", "bob")] == [memory]  # not forgotten
    bob_session = fake.tenant("acme", "bob").sessions["bobs-session"]
    assert not bob_session.archives  # not committed by alice's compact
    # The same calls with bob's credential do reach it: the refusals above are isolation.
    bob = await rpc.assemble({**ref, "messages": oc_turns("hi"), "prompt": "what was the plan?"}, **bearer(TOKEN_B))
    assert "bob's secret plan" in bob.text


@pytest.mark.parametrize(
    "text",
    [
        '127.0.0.1:5 - "POST /v1/assemble?token=SECRET HTTP/1.1" 401',
        "GET /v1/tools?a=1&api_key=SECRET&b=2",
        "GET /v1/tools?access_token=SECRET",
        "Authorization: Bearer SECRET-0123",
        "password=SECRET",
        "GET /v1/tools?rpcToken=SECRET HTTP/1.1",
        "GET /v1/tools?rpc-token=SECRET&RPC_TOKEN=SECRET",
        "X-Api-Key: SECRET",
        'settings {"apiKey": "SECRET", "userApiKeys": "SECRET"}',
        "redis://:SECRET@redis.internal:6379/0",
        "OVSTREAM_REDIS_PASSWORD=SECRET x-auth=SECRET clientSecret=SECRET",
    ],
)
def test_a_credential_is_left_out_of_a_log_line(text: str) -> None:
    assert "SECRET" not in redact(text) and "[redacted]" in redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "ovstream commits s --session-key agent:main:main",
        "monkey=3",
        "session_key=k",
        "sessionKey=k",
        "commitTokenThreshold=20000",
        "invalid configuration: apiKey: Input should be a valid string",
    ],
)
def test_a_line_without_a_credential_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text


def test_no_token_reaches_the_access_log_wherever_a_client_puts_it(rpc: Any, capfd: Any) -> None:
    # uvicorn's access log writes a request's path with its query string: a token sent there
    # (refused, yet a valid token) must not land in the log; headers are never logged.
    configure("rpc")
    with served(rpc.app) as port:
        for path in (f"/v1/tools?token={TOKEN_A}", f"/v1/tools?x=1&api_key={TOKEN_B}", f"/metrics?token={TOKEN_ADMIN}"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN_B[:-1]}"})
            assert conn.getresponse().status == 401
            conn.close()
    logged = capfd.readouterr().err
    assert "/v1/tools?token=[redacted]" in logged, logged  # the access log ran, redacted
    for token in (TOKEN_A, TOKEN_B, TOKEN_ADMIN, TOKEN_B[:-1]):
        assert token not in logged, logged


def _credential_parameter_names() -> list[str]:
    """Every credential setting's own name, as a client or a script may spell it (snake_case,
    camelCase, kebab-case, the environment's), and the common names of the trade."""
    settings = [name for name, field in Settings.model_fields.items() if field.repr is False and "url" not in name]
    assert {"api_key", "rpc_token", "user_api_keys", "rpc_credentials"} <= set(settings), settings
    spelled = set()
    for name in settings:
        camel = Settings.model_fields[name].alias or name
        spelled |= {name, camel, name.replace("_", "-"), f"OVSTREAM_{name.upper()}"}
    return sorted(spelled | {"apiKey", "X-Api-Key", "access_token", "token", "api_key", "secret", "password"})


def test_every_credential_name_is_taken_for_one() -> None:
    for name in _credential_parameter_names():
        assert credential_name(name), name


def test_no_credential_reaches_any_log_line_under_any_name(rpc: Any, capfd: Any) -> None:
    # Each credential name as a query parameter and a header: the access log (and anything
    # else the RPC logs for the request) holds none of the values.
    configure("rpc")
    names = _credential_parameter_names()
    values = {name: f"cred-{i:03d}-of-{name}-0123456789" for i, name in enumerate(names)}
    with served(rpc.app) as port:
        for name, value in values.items():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", f"/v1/tools?x=1&{name}={value}", headers={name: value})
            assert conn.getresponse().status == 401
            conn.close()
    logged = capfd.readouterr().err
    assert f"/v1/tools?x=1&{names[0]}=[redacted]" in logged, logged  # the access log ran, redacted
    for value in values.values():
        assert value not in logged, logged
