"""Bad input over real TCP (uvicorn, as ``ovstream rpc`` serves): every answer is a 4xx
with a message or a 2xx, never a 5xx, and the same kept-alive connection answers the
next request; a tool never claims what OV did not do.

The app runs on the real redis-server and the FakeOV; hypothesis sends random and
adversarial bodies (deep nesting, huge strings, invalid UTF-8, odd ids and URIs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import Settings
from tests.helpers.hostile import bodies, encoded, json_values, nested, odd_text
from tests.helpers.served import KeptConnection, served
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.app import create_app
from workers.rpc.tools.registry import tools

pytestmark = pytest.mark.redis

ROUTES = ["/v1/assemble", "/v1/compact", *(f"/v1/tools/{name}" for name in sorted(tools()))]


@dataclass
class Served:
    port: int
    fake: FakeOV
    settings: Settings

    def connect(self) -> KeptConnection:
        return KeptConnection(self.port)


@pytest.fixture(scope="module")
def server(redis_server: str) -> Iterator[Served]:
    fake = FakeOV()
    app_settings = Settings(
        redis_url=redis_server,
        key_prefix="hostile",
        ov_backoff_s=0,
        ov_retries=0,
        compact_wait_s=0.1,
        recall_timeout_s=1.0,
    )
    with served(create_app(app_settings, ov_transport=fake.transport())) as port:
        yield Served(port, fake, app_settings)


@pytest.fixture
def conn(server: Served) -> Iterator[KeptConnection]:
    connection = server.connect()
    try:
        yield connection
    finally:
        connection.close()


def _is_error_body(body: bytes) -> bool:
    error = json.loads(body).get("error", {})
    return isinstance(error.get("code"), str) and bool(error.get("message"))


# --- the body limit ---------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["/v1/assemble", "/v1/compact", "/v1/tools/add_resource"])
def test_a_50mb_body_gets_413_and_the_connection_answers_the_next_request(conn: KeptConnection, route: str) -> None:
    body = b'{"sessionId": "s", "messages": [{"role": "user", "content": "' + b"x" * (50 * 1024 * 1024) + b'"}]}'
    status, answer, _ = conn.post(route, body)
    assert status == 413 and json.loads(answer)["error"]["code"] == "body_too_large"
    assert "maxBodyBytes=33554432" in json.loads(answer)["error"]["message"]
    status, _, _ = conn.post("/v1/assemble", b'{"sessionId": "s", "messages": []}')
    assert status == 200


def test_a_chunked_body_past_the_limit_gets_413_too(server: Served, conn: KeptConnection) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"sessionId": "s", "messages": [{"role": "user", "content": "'
        for _ in range(server.settings.max_body_bytes // (1 << 20) + 1):
            yield b"x" * (1 << 20)
        yield b'"}]}'

    conn.conn.request("POST", "/v1/assemble", body=chunks(), encode_chunked=True)
    response = conn.conn.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["code"] == "body_too_large"
    assert conn.health() == 200


def test_a_body_within_the_limit_is_served(conn: KeptConnection) -> None:
    text = "y" * (4 * 1024 * 1024)
    status, answer, _ = conn.post(
        "/v1/assemble", json.dumps({"sessionId": "s", "messages": [{"role": "user", "content": text}]}).encode()
    )
    assert status == 200 and json.loads(answer)["messages"][0]["content"] == text


# --- nesting ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "body",
    [
        nested(100_000),
        b'{"sessionId": "s", "runtimeContext": {"a": ' + nested(5_000) + b"}}",
        b'{"sessionId": "s", "messages": [{"role": "user", "content": ' + nested(5_000) + b"}]}",
        b'{"sessionId": "s", "params": {"query": "q", "x": ' + nested(5_000) + b"}}",
    ],
    ids=["body", "runtime-context", "message", "params"],
)
def test_too_deep_json_is_400_and_the_connection_stays(conn: KeptConnection, route: str, body: bytes) -> None:
    status, answer, _ = conn.post(route, body)
    assert 400 <= status < 500 and _is_error_body(answer), answer[:200]
    assert conn.health() == 200


# --- random and adversarial bodies --------------------------------------------------------------------

_params = st.dictionaries(
    st.sampled_from(
        ["query", "uri", "targetUri", "text", "content", "path", "filename", "to", "limit", "archiveId", "sessionId"]
    )
    | odd_text,
    odd_text | json_values,
    max_size=5,
)
_request = st.fixed_dictionaries(
    {},
    optional={
        "sessionId": odd_text | json_values,
        "sessionKey": odd_text | json_values,
        "messages": st.lists(st.dictionaries(st.sampled_from(["role", "content"]) | odd_text, json_values, max_size=3))
        | json_values,
        "runtimeContext": st.dictionaries(st.sampled_from(["agentId", "sessionKey"]) | odd_text, json_values)
        | json_values,
        "tokenBudget": json_values,
        "prompt": odd_text | json_values,
        "params": _params | json_values,
        "force": json_values,
    },
)


_body = bodies(_request, min_depth=900)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(ROUTES), body=_body)
def test_no_body_gets_a_5xx_a_reset_or_a_false_answer(server: Served, route: str, body: bytes) -> None:
    if len(server.fake.memories()) < 2:
        server.fake.seed_memory("User likes jazz and prefers Rust.")
    before = {m.uri for m in server.fake.memories()}
    conn = server.connect()
    try:
        status, answer, headers = conn.post(route, body)
        assert status < 500, answer[:300]
        assert headers.get("content-type") == "application/json"
        if status >= 400:
            assert _is_error_body(answer), answer[:300]
        elif route == "/v1/tools/memory_forget":
            details = json.loads(answer)["details"]
            gone = before - {m.uri for m in server.fake.memories()}
            if details.get("action") == "deleted":
                assert details["uri"] in gone and details["deleted"] == len(gone)
            else:
                assert not gone, details
        assert conn.health() == 200
    finally:
        conn.close()


def _respelled(uri: str, data: st.DataObject) -> str:
    """``uri`` spelled another way a caller (or an attacker) might: escapes, dot segments."""
    head, _, tail = uri.partition("viking://")
    segments = tail.split("/")
    out: list[str] = []
    for segment in segments:
        choice = data.draw(st.sampled_from(["same", "escape-dots", "detour", "dot", "climb"]))
        if choice == "escape-dots":
            segment = segment.replace(".", data.draw(st.sampled_from(["%2e", "%2E", "%252e"])))
        elif choice == "detour":
            out.append("x/..")
        elif choice == "dot":
            out.append(".")
        elif choice == "climb":
            out.append(data.draw(st.sampled_from(["..", "%2e%2e", "..%2f.."])))
        out.append(segment)
    return head + "viking://" + "/".join(out)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_forget_deletes_exactly_what_it_says(server: Served, data: st.DataObject) -> None:
    target = server.fake.seed_memory("User keeps a notebook of forgettable facts.")
    before = {m.uri for m in server.fake.memories()}
    spelled = _respelled(target, data)
    conn = server.connect()
    try:
        body = encoded({"sessionId": "s", "params": {"uri": spelled}})
        status, answer, _ = conn.post("/v1/tools/memory_forget", body)
    finally:
        conn.close()
    gone = before - {m.uri for m in server.fake.memories()}
    assert status in (200, 422), answer[:300]
    details = json.loads(answer).get("details", {})
    if details.get("action") == "deleted":
        assert gone == {details["uri"]} and details["deleted"] == 1
    else:
        assert not gone, (spelled, details)
