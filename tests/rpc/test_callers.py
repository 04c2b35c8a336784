"""workers.rpc.context.Callers: a remembered identity resolves as resolve_caller does,
whatever was resolved before it."""

from __future__ import annotations

from types import SimpleNamespace
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


def resolved(settings: Settings, identity: dict[str, Any], required: bool, callers: Callers | None = None) -> Any:
    """What ``callers`` (else resolve_caller itself) makes of ``identity``."""
    try:
        if callers is None:
            return resolve_caller(settings, **identity, session_required=required)
        body = SimpleNamespace(
            sessionId=identity["session_id"],
            sessionKey=identity["session_key"],
            runtimeContext=identity["runtime_context"],
        )
        return callers.of(body, identity["api_key"], session_required=required)
    except RpcError as exc:
        return ("refused", exc.status, exc.field)


@pytest.mark.parametrize("required", [False, True])
def test_every_identity_resolves_as_resolve_caller_does_in_any_order(required: bool) -> None:
    callers = Callers(SETTINGS)
    for _ in range(2):  # the second round comes from memory
        for identity in IDENTITIES:
            assert resolved(SETTINGS, identity, not required, callers) == resolved(SETTINGS, identity, not required)
            assert resolved(SETTINGS, identity, required, callers) == resolved(SETTINGS, identity, required)


def test_a_caller_without_a_session_kept_for_a_tool_still_refuses_assemble() -> None:
    callers = Callers(SETTINGS)
    nobody = SimpleNamespace(sessionId=None, sessionKey=None, runtimeContext=None)
    assert callers.of(nobody, None, session_required=False).ov_session_id is None
    with pytest.raises(RpcError) as refused:
        callers.of(nobody, None, session_required=True)
    assert refused.value.status == 400


def test_the_same_identity_is_one_caller() -> None:
    callers = Callers(SETTINGS)
    first = SimpleNamespace(sessionId="s1", sessionKey=None, runtimeContext={"agentId": "coder"})
    again = SimpleNamespace(sessionId="s1", sessionKey=None, runtimeContext={"agentId": "coder"})
    assert callers.of(first, None, session_required=True) is callers.of(again, None, session_required=True)
