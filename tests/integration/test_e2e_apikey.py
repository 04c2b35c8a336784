"""End to end on the real openviking-server 0.5.2 in API-key mode: two users stay apart.

An account with users alice and bob (created through OV's admin API). Capture
acts for each with the key ``user_api_keys`` maps the TurnEvent's ``user`` to;
each RPC call carries the caller's own key in ``X-OpenViking-API-Key``. Alice's
conversation crosses the commit threshold and states a preference; bob then uses
the same session id and asks the same question: he never sees her session,
its archive, or her memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.helpers.e2e import (
    RECALL_MARKER,
    SUMMARY_PREFIX,
    Conversation,
    OVSession,
    Service,
    check_crosses_at_last_turn,
    commit_rows,
    first_text,
    message_text,
    wait_for,
)

pytest_plugins = ("tests.helpers.e2e_fixtures",)

PREFERENCE = "I prefer cardamom buns with black coffee for breakfast on Sundays."
QUESTION = "What should I bake for breakfast on Sunday: cardamom buns with black coffee?"
ARCHIVED_WORD = "quince"
ALICE_TURNS = [
    (
        "Good morning! I am sorting out the weekend plans for the family. " + PREFERENCE,
        "Good morning! Cardamom buns with black coffee for the Sunday breakfast, noted for the weekend plan.",
    ),
    (
        f"On Saturday the children visit the {ARCHIVED_WORD} orchard behind the old mill, from ten until noon.",
        f"Saturday from ten until noon: the {ARCHIVED_WORD} orchard behind the old mill with the children.",
    ),
    (
        "In the afternoon we repaint the garden fence, so we need two tins of green paint and new brushes.",
        "Shopping list: two tins of green paint and a set of new brushes for the garden fence.",
    ),
    (
        "Sunday afternoon is for the chess tournament at the community hall, starting at three o'clock.",
        "Sunday at three: the chess tournament at the community hall. I will add travel time to the plan.",
    ),
    (
        "Please finish the plan with a reminder to water the tomatoes every evening, Saturday and Sunday.",
        "Added: water the tomatoes every evening on Saturday and Sunday. The weekend plan is complete now.",
    ),
    (
        (
            "One last thing: the neighbours are away, so we also feed their two cats on Saturday and Sunday "
            "morning, around eight."
        ),
        (
            "Added as well: feed the neighbours' two cats on Saturday and Sunday morning at around eight "
            "o'clock, while they are away."
        ),
    ),
]


@dataclass
class Alice:
    conv: Conversation
    key: str


@pytest.fixture(scope="module")
def alice(keyed_service: Service, ov_keyed_server, tenants) -> Alice:
    """Alice's conversation captured and committed (phase 2 completed)."""
    check_crosses_at_last_turn(ALICE_TURNS)
    conv = Conversation("alice", user="alice")
    for user_text, assistant_text in ALICE_TURNS:
        keyed_service.publish(conv.turn(user_text, assistant_text))
    ov = OVSession(ov_keyed_server.url, api_key=tenants.keys["alice"])
    try:
        ov.wait_total_messages(conv.ov_session_id, len(conv.messages))
    finally:
        ov.close()
    [outcome] = keyed_service.wait_commits(conv, 1)
    assert outcome.status == "completed" and outcome.user == "alice", outcome
    assert outcome.memories_extracted and outcome.memories_extracted >= 1
    return Alice(conv, tenants.keys["alice"])


@pytest.fixture(scope="module")
def bob_key(tenants) -> str:
    return tenants.keys["bob"]


def _recall_answer(service: Service, key: str, user: str) -> dict:
    conv = Conversation(f"{user}-later", user=user)
    return service.assemble(conv, [{"role": "user", "content": QUESTION}], main=False, api_key=key)


def test_alice_gets_her_summary_and_her_recall(keyed_service: Service, alice: Alice) -> None:
    main = keyed_service.assemble(alice.conv, main=True, api_key=alice.key)
    assert first_text(main["messages"][0]).startswith(SUMMARY_PREFIX)
    assert ARCHIVED_WORD in first_text(main["messages"][0])
    assert "systemPromptAddition" in main

    def recalled() -> str | None:  # new memories become searchable shortly after phase 2
        text = first_text(_recall_answer(keyed_service, alice.key, "alice")["messages"][-1])
        return text if RECALL_MARKER in text else None

    text = wait_for(recalled, "alice's auto-recall finding her preference")
    assert PREFERENCE in text and "viking://user/alice/memories/" in text

    [row] = commit_rows(keyed_service.commits_cli(alice.conv))
    assert (row["REASON"], row["STATUS"], row["ARCHIVE"]) == ("threshold", "completed", "archive_001")


def test_bob_never_sees_alices_session(keyed_service: Service, alice: Alice, bob_key: str) -> None:
    # bob asks for the main context of a session with alice's id: OV has none for him
    answer = keyed_service.assemble(alice.conv, main=True, api_key=bob_key)
    assert answer["messages"] == alice.conv.messages  # passthrough: nothing added
    assert "systemPromptAddition" not in answer
    found = keyed_service.tool("ov_archive_search", {"query": ARCHIVED_WORD}, conv=alice.conv, api_key=bob_key)
    assert found["details"]["matchCount"] == 0
    compact = keyed_service.post("/v1/compact", alice.conv.ref, api_key=bob_key)
    assert compact == {"ok": True, "compacted": False, "reason": "session_not_found"}
    bob_view = Conversation("bob", user="bob", session_id=alice.conv.session_id)
    assert "no commits recorded" in keyed_service.commits_cli(bob_view)


def test_bob_never_recalls_alices_memory(keyed_service: Service, alice: Alice, bob_key: str) -> None:
    # alice's recall of the same question finds it (the previous test waited for the index)
    wait_for(
        lambda: RECALL_MARKER in first_text(_recall_answer(keyed_service, alice.key, "alice")["messages"][-1]),
        "alice's recall",
    )
    answer = _recall_answer(keyed_service, bob_key, "bob")
    assert "cardamom buns" not in first_text(answer["messages"][-1]).split(QUESTION)[0]
    assert all("viking://user/alice" not in message_text(m) for m in answer["messages"])
    tool = keyed_service.tool("memory_recall", {"query": QUESTION}, api_key=bob_key)
    assert all("/user/alice/" not in m["uri"] for m in tool["details"].get("memories", []))
    assert PREFERENCE not in tool["content"][0]["text"]


def test_same_session_id_two_users_two_sessions(
    keyed_service: Service, ov_keyed_server, alice: Alice, bob_key: str
) -> None:
    """Bob captures his own turn in a session with alice's id: each user sees only theirs."""
    bob = Conversation("bob", user="bob", session_id=alice.conv.session_id)
    keyed_service.publish(
        bob.turn(
            "Bob here: the bicycle needs new brake pads before the trip on Friday.",
            "New brake pads before Friday's trip: noted.",
        )
    )
    keyed_service.publish(bob.turn("Also check the tyre pressure.", "Tyre pressure: on the list too."))
    ov = OVSession(ov_keyed_server.url, api_key=bob_key)
    try:
        ov.wait_total_messages(bob.ov_session_id, len(bob.messages))
    finally:
        ov.close()
    mine = keyed_service.assemble(bob, main=True, api_key=bob_key)
    assert [message_text(m) for m in mine["messages"]] == bob.texts()
    assert all(ARCHIVED_WORD not in message_text(m) and SUMMARY_PREFIX not in message_text(m) for m in mine["messages"])
    hers = keyed_service.assemble(alice.conv, main=True, api_key=alice.key)
    assert first_text(hers["messages"][0]).startswith(SUMMARY_PREFIX)
    assert all("brake pads" not in message_text(m) for m in hers["messages"])


def test_alice_compacts_with_her_own_key(keyed_service: Service, alice: Alice, bob_key: str) -> None:
    """Runs last: it archives alice's kept turn (archive_002) through the service's worker,
    which acts with alice's key from user_api_keys."""
    answer = keyed_service.post("/v1/compact", alice.conv.ref, api_key=alice.key)
    assert (answer["ok"], answer["compacted"], answer["reason"]) == (True, True, "commit_completed"), answer
    assert answer["result"]["firstKeptEntryId"] == "archive_002"
    assert answer["result"]["summary"].startswith("# Working Memory")
    outcomes = keyed_service.commits(alice.conv)
    assert [(o.reason, o.status, o.user) for o in outcomes] == [
        ("threshold", "completed", "alice"),
        ("compact", "completed", "alice"),
    ]
    # bob still has nothing there
    bob_view = Conversation("bob", user="bob", session_id=alice.conv.session_id)
    assert keyed_service.commits(bob_view) == []
    r = keyed_service.http.post(
        "/v1/tools/ov_archive_expand",
        headers={"X-OpenViking-API-Key": bob_key},
        json={**alice.conv.ref, "params": {"archiveId": "archive_002"}},
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "archive_not_found", r.text
