"""Property test over the published OpenAPI spec: no input makes the RPC answer 5xx,
and every answer is one the spec documents (status code, content type, body schema).

The app runs on embedded Redis (fakeredis) and the FakeOV, so the run needs
no servers; 503 (OV/Redis unreachable) cannot happen here, so any 5xx is a bug.
"""

from __future__ import annotations

import asyncio

import fakeredis
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from core.config import Settings
from workers.dev.fake_ov.app import FakeOV
from workers.rpc.app import create_app
from workers.rpc.tools.registry import tools


def _make_app() -> object:
    fake = FakeOV()
    fake.seed_memory("User prefers Rust for backend services.")
    return create_app(
        Settings(
            redis_url="fakeredis://",
            ov_backoff_s=0,
            ov_retries=0,
            compact_wait_s=0.05,
            recall_timeout_s=1.0,
            erase_settle_s=0,  # an erasure's pauses: none needed with nothing capturing
        ),
        redis=fakeredis.FakeAsyncRedis(),
        commit_redis=fakeredis.FakeRedis(),
        ov_transport=fake.transport(),
    )


schema = schemathesis.openapi.from_asgi("/openapi.json", _make_app())
# Schemathesis starts and stops its app per operation; the tool test below drives
# its own app without a lifespan, so the two must not share one.
_tools_app = _make_app()


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_is_a_server_error(case: schemathesis.Case) -> None:
    case.call_and_validate(
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    )


# The spec types a tool's params as a free object, so schemathesis rarely reaches
# the tools themselves: feed each one arbitrary params built from its own field names.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@pytest.mark.parametrize("tool", sorted(tools()))
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_tool_params_are_a_server_error(tool: str, data: st.DataObject) -> None:
    fields = sorted(tools()[tool].params.model_json_schema().get("properties", {}))
    params = data.draw(st.dictionaries(st.sampled_from(fields) | st.text(max_size=5), _json, max_size=4))
    r = asyncio.run(_post(f"/v1/tools/{tool}", {"sessionId": "s", "params": params}))
    assert r.status_code < 500, r.text


async def _post(path: str, body: object) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(_tools_app), base_url="http://rpc") as client:
        return await client.post(path, json=body)
