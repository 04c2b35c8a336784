"""workers.rpc.context.Callers: a remembered identity resolves as resolve_caller does,
whatever was resolved before it."""

from __future__ import annotations

from typing import Any

import pytest

from core.config import Settings
from workers.rpc.context import Callers, RpcError, resolve_caller

SETTINGS = Settings(user_api_keys={"alice": "key-a"}, bypass_session_patterns=("cron:*",))

IDENTITIES: list[dict[str, Any]] = [
    {"session_id": "s1", "session_key": None, "runtime_context": None, "api_key": None},
    {"session_id": " s1 ", "session_key": None, "runtime_context": None, "api_key": None},
    {"session_id": "s1", "session_key": None, "runtime_context": {"agentId": "coder"}, "api_key": None},
    {"session_id": "s1", "session_key": None, "runtime_context": {"sessionKey": "agent:ops:main"}, "api_key": None},
    {"session_id": "s1", "session_key": "agent:ops:main", "runtime_context": None, "api_key": None},
    {"session_id": "s1", "session_key": None, "runtime_context": None, "api_key": "key-a"},
    {"session_id": "s1", "session_key": None, "runtime_context": None, "api_key": "someone-else"},
    {"session_id": "cron:nightly", "session_key": None, "runtime_context": None, "api_key": None},
    {"session_id": None, "session_key": None, "runtime_context": None, "api_key": None},
    {"session_id": "s1", "session_key": None, "runtime_context": {"agentId": ["not", "text"]}, "api_key": None},
    {"session_id": "s1", "session_key": None, "runtime_context": {"agentId": {"nested": 1}}, "api_key": None},
]


def resolved(resolve: Any, identity: dict[str, Any], required: bool) -> Any:
    try:
        return resolve(**identity, session_required=required)
    except RpcError as exc:
        return ("refused", exc.status, exc.field)


@pytest.mark.parametrize("required", [False, True])
def test_every_identity_resolves_as_resolve_caller_does_in_any_order(required: bool) -> None:
    callers = Callers(SETTINGS)
    expected = [resolved(lambda **kw: resolve_caller(SETTINGS, **kw), i, required) for i in IDENTITIES]
    for _ in range(2):  # the second round comes from memory
        for identity, want in zip(IDENTITIES, expected, strict=True):
            assert resolved(callers.resolve, identity, not required) == resolved(
                lambda **kw: resolve_caller(SETTINGS, **kw), identity, not required
            )
            assert resolved(callers.resolve, identity, required) == want


def test_a_caller_without_a_session_kept_for_a_tool_still_refuses_assemble() -> None:
    callers = Callers(SETTINGS)
    nobody: dict[str, Any] = {"session_id": None, "session_key": None, "runtime_context": None, "api_key": None}
    assert callers.resolve(**nobody).ov_session_id is None
    with pytest.raises(RpcError) as refused:
        callers.resolve(**nobody, session_required=True)
    assert refused.value.status == 400


def test_the_same_identity_is_one_caller() -> None:
    callers = Callers(SETTINGS)
    identity = IDENTITIES[2]
    assert callers.resolve(**identity) is callers.resolve(**dict(identity, runtime_context={"agentId": "coder"}))
