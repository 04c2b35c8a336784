"""End to end on the real openviking-server 0.5.2: a secret typed in a turn is in neither OV
(the session's messages, its archive, the memories phase 2 extracted), Redis (beyond the stream
entry of a producer without the rules, until capture trims it), the console nor the log.

The turns are published as a producer without the plugin's rules would (``publish_turn``), so
capture's own redaction is what is tested here; the plugin's, before anything leaves the
gateway, is tested in clients/openclaw/test/redaction.test.ts against the same table.
"""

from __future__ import annotations

import json

from core.messages.tokens import estimate_message_tokens
from tests.helpers.e2e import Conversation, OVSession, Service
from tests.helpers.redis_dump import values
from workers.store.keys import Keys

pytest_plugins = ("tests.helpers.e2e_fixtures",)

AWS = "AKIA" + "Q3EGRV7ZEXAMPLEX"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyZWRhY3Rpb24tZTJlIn0.c2lnbmF0dXJlLW9mLXRoZS1lMmUtdGVzdA"
PASSWORD = "Hunter2-e2e-Pw9"
SECRETS = (AWS, JWT, PASSWORD)


def _without_streams(service: Service) -> bytes:
    """Every key's value in the service's Redis but the turn streams' entries."""
    keys = Keys(service.settings.key_prefix)
    return values(service.redis, leave_out=frozenset(keys.stream(s) for s in range(service.settings.shards)))


def test_a_secret_typed_in_a_turn_is_kept_nowhere(e2e_service: Service, dev_ov: OVSession) -> None:
    conv = Conversation("redacted")
    said = (
        f"I prefer jasmine tea in the afternoon. For the deploy use the key {AWS}, the session token {JWT} "
        f"and DB_PASSWORD={PASSWORD} on the staging database."
    )
    e2e_service.publish(conv.turn(said, f"Noted: jasmine tea; the deploy runs with the key {AWS}."))
    e2e_service.publish(conv.turn("Thanks, that is all for today.", "You are welcome."))
    dev_ov.wait_total_messages(conv.ov_session_id, len(conv.messages))
    # what OV holds of the session, as written
    context = dev_ov.context(conv.ov_session_id)
    written = json.dumps(context["messages"])
    assert all(s not in written for s in SECRETS), written
    assert (
        "<redacted:aws_access_key#1>" in written
        and "<redacted:jwt#1>" in written
        and "<redacted:password#1>" in written
    )
    # the assemble of the next turn (the host sends its transcript as typed): the console keeps none
    e2e_service.assemble(conv, main=True)
    # a compact: phase 2 extracts memories from the archive
    answer = e2e_service.post(
        "/v1/compact", {**conv.ref, "tokenBudget": 128_000, "currentTokenCount": estimate_message_tokens(conv.messages)}
    )
    assert answer["ok"] and answer["compacted"], answer
    [outcome] = [o for o in e2e_service.commits(conv) if o.reason == "compact"]
    assert outcome.status == "completed" and (outcome.memories_extracted or 0) >= 1, outcome
    archive = dev_ov.http.get(f"/api/v1/sessions/{conv.ov_session_id}/archives/archive_001").json()["result"]
    assert all(s not in json.dumps(archive) for s in SECRETS)
    # any file OV keeps of its users and agents: memories, sessions and archives, its own privacy store
    for secret, space in ((s, space) for s in SECRETS for space in ("viking://user", "viking://agent")):
        found = dev_ov.http.post("/api/v1/search/grep", json={"uri": space, "pattern": secret})
        assert found.status_code == 200, found.text
        assert found.json()["result"]["count"] == 0, found.json()
    remembered = dev_ov.http.post("/api/v1/search/grep", json={"uri": "viking://user", "pattern": "jasmine tea"})
    matched = {m["uri"].split("/")[4] for m in remembered.json()["result"]["matches"]}
    assert {"memories", "sessions"} <= matched, matched  # the grep reads both: its zeros above mean something
    # Redis, the console's pages, the log
    kept = _without_streams(e2e_service)
    assert all(s.encode() not in kept for s in SECRETS)
    inspected = e2e_service.http.get("/v1/sessions/inspect", params={"sessionId": conv.session_id})
    page = e2e_service.http.get("/console/session", params={"id": conv.ov_session_id, "agent": conv.agent_id})
    for text in (inspected.text, page.text, e2e_service.log_path.read_text(errors="replace")):
        assert all(s not in text for s in SECRETS)
    # counted by kind (never a value): the key twice (both messages), the token and the password once
    counted = [
        line
        for line in e2e_service.http.get("/metrics").text.splitlines()
        if line.startswith("ovstream_redactions_total")
    ]
    assert any('kind="aws_access_key"' in line and line.endswith(" 2.0") for line in counted), counted
    assert any('kind="jwt"' in line for line in counted) and any('kind="password"' in line for line in counted)
