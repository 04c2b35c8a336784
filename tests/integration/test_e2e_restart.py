"""End to end on the real openviking-server 0.5.2: the service stops and starts again,
turns keep arriving, bypassed sessions stay out of OV.

Turn events are published while ``ovstream up`` is down; the next ``ovstream up`` on
the same Redis captures each of them exactly once. "Capture is done" is read from the
stream's consumer group (every entry acknowledged), so the checks need no sleep.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.e2e import Conversation, OVSession, Service, message_text

pytest_plugins = ("tests.helpers.e2e_fixtures",)

BYPASS_PATTERN = "agent:main:e2e-bypass-*"


@pytest.fixture(scope="module")
def e2e_settings() -> dict[str, Any]:
    return {"bypass_session_patterns": (BYPASS_PATTERN,)}


def test_turns_published_while_down_are_captured_once_after_restart(e2e_service: Service, dev_ov: OVSession) -> None:
    conv = Conversation("restart")
    e2e_service.publish(conv.turn("The bicycle needs new brake pads.", "Brake pads: noted."))
    dev_ov.wait_total_messages(conv.ov_session_id, 2)

    e2e_service.stop()
    e2e_service.publish(conv.turn("And the chain needs oil.", "Chain oil: noted."))
    e2e_service.publish(conv.turn("The bell is broken too.", "A new bell: noted."))
    e2e_service.start()
    # whether capture has caught up yet or not, the main call holds each message once:
    # what the snapshot lacks comes from the caller's transcript (the lag overlay)
    early = e2e_service.assemble(conv, main=True)
    assert [message_text(m) for m in early["messages"]] == conv.texts()

    e2e_service.wait_drained()
    assert dev_ov.state(conv.ov_session_id)["total_message_count"] == len(conv.messages)
    stored = [p["text"] for m in dev_ov.context(conv.ov_session_id)["messages"] for p in m["parts"]]
    assert stored == conv.texts()
    answer = e2e_service.assemble(conv, main=True)
    assert [message_text(m) for m in answer["messages"]] == conv.texts()


def test_a_republished_turn_is_not_captured_twice(e2e_service: Service, dev_ov: OVSession) -> None:
    """The plugin's publisher re-sends an event whose XADD reply it lost (same event_id;
    clients/openclaw/src/publisher.ts says so): its messages must land in OV once."""
    conv = Conversation("republish")
    first = conv.turn("Water the ferns on Monday.", "Ferns on Monday: noted.")
    second = conv.turn("And the cactus once a month.", "Cactus monthly: noted.")
    for event in (first, second, second):
        e2e_service.publish(event)
    e2e_service.wait_drained()
    assert dev_ov.state(conv.ov_session_id)["total_message_count"] == len(conv.messages)


def test_a_heartbeat_turn_is_not_captured(e2e_service: Service, dev_ov: OVSession) -> None:
    conv = Conversation("heartbeat")
    event = conv.turn("HEARTBEAT_OK check", "HEARTBEAT_OK")
    event.is_heartbeat = True
    e2e_service.publish(event)
    e2e_service.wait_drained()
    assert dev_ov.state(conv.ov_session_id) is None


def test_a_bypassed_session_never_reaches_ov(e2e_service: Service, dev_ov: OVSession) -> None:
    conv = Conversation("bypass")
    assert conv.session_key.startswith(BYPASS_PATTERN[:-1])
    long_text = "A long message that would cross the commit threshold on its own. " * 40
    e2e_service.publish(conv.turn(long_text, "Understood, " + long_text))
    e2e_service.wait_drained()
    assert dev_ov.state(conv.ov_session_id) is None
    assert e2e_service.commits(conv) == []
    answer = e2e_service.assemble(conv, main=True)
    assert answer["messages"] == conv.messages and "systemPromptAddition" not in answer
    compact = e2e_service.post("/v1/compact", conv.ref)
    assert compact == {"ok": True, "compacted": False, "reason": "session_bypassed"}
    tool = e2e_service.tool("ov_archive_search", {"query": "long"}, conv=conv)
    assert tool["details"]["action"] == "bypassed"
