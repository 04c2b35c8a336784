"""Capture redacts what a producer without the plugin's rules published (workers.capture.redacting):
OV, the snapshot, the dead letters and the counts hold no secret, on a real Redis with the fake OV."""

from __future__ import annotations

import json

from core.events import STREAM_FIELD, TurnEvent
from tests.helpers.capture import make_worker, ov_texts, publish, run_until
from tests.helpers.redis_dump import values
from workers.rpc.deployment_metrics import RedactionCollector
from workers.store.dead_letters import list_dead_letters
from workers.store.keys import Keys, shard_of

AWS = "AKIA" + "IOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


def _turn(session: str, text: str, tool_text: str, **fields) -> TurnEvent:
    messages = [
        {"role": "user", "content": text},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c1", "name": "sh", "arguments": {"cmd": tool_text}}],
        },
        {"role": "toolResult", "toolCallId": "c1", "content": [{"type": "text", "text": "ok"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]
    return TurnEvent(event_id=f"{session}-1", session_id=session, messages=messages, published_at=1.0, **fields)


async def test_a_secret_from_a_producer_without_the_rules_reaches_neither_ov_nor_the_snapshot(
    redis_client, settings, fake_ov
):
    worker = make_worker(settings, fake_ov)
    publish(redis_client, settings, [_turn("leaky", f"my key is {AWS}, token {JWT}", f"export AWS_KEY={AWS}")])
    await run_until([worker], lambda: len(ov_texts(fake_ov, "leaky")) >= 2)
    written = json.dumps([r.content.decode() for r in fake_ov.requests if r.method == "POST"])
    assert AWS not in written and JWT not in written
    assert "my key is <redacted:aws_access_key#1>, token <redacted:jwt#1>" in ov_texts(fake_ov, "leaky")
    assert "export AWS_KEY=<redacted:aws_access_key#1>" in written  # the tool call's arguments: the same number
    # what capture keeps of it (applied state, snapshot) holds placeholders only; the stream keeps
    # what the producer wrote until trimmed: that producer had no rules (the plugin redacts first)
    stream = Keys(settings.key_prefix).stream(shard_of("leaky", settings.shards))
    kept = values(redis_client, leave_out=frozenset({stream}))
    assert AWS.encode() not in kept and JWT.encode() not in kept
    assert b"<redacted:aws_access_key#1>" in kept
    # counted per tenant and kind: what OV got masked, never a value
    [family] = list(RedactionCollector(redis_client, settings).collect())
    counted = {(s.labels["tenant"], s.labels["kind"]): s.value for s in family.samples if s.name.endswith("_total")}
    assert counted == {("-", "aws_access_key"): 2, ("-", "jwt"): 1}


async def test_a_dead_letter_keeps_no_secret(redis_client, settings, fake_ov):
    worker = make_worker(settings, fake_ov)
    stream = Keys(settings.key_prefix).stream(shard_of("mate", settings.shards))
    redis_client.xadd(stream, {STREAM_FIELD: f'{{"not an event": "password=hunter22 {AWS}"'.encode()})
    bad_turn = _turn("mate", f"key {AWS}", "ls", session_key="x" * 5000)  # refused by capture, dead-lettered
    publish(redis_client, settings, [bad_turn])
    await run_until([worker], lambda: len(list_dead_letters(redis_client, settings)) >= 1)
    letters = list_dead_letters(redis_client, settings)
    assert letters and all(AWS.encode() not in (letter.payload or b"") for letter in letters)
    assert any(b"<redacted:aws_access_key#1>" in (letter.payload or b"") for letter in letters)
    assert all(b"hunter22" not in (letter.payload or b"") for letter in letters)


async def test_an_agent_with_redaction_off_keeps_its_text(redis_client, settings, fake_ov):
    settings = settings.model_copy(update={"redaction_agents": {"lab": "off"}})
    worker = make_worker(settings, fake_ov)
    publish(redis_client, settings, [_turn("lab-session", f"test key {AWS}", "ls", agent_id="lab")])
    await run_until([worker], lambda: len(ov_texts(fake_ov, "lab-session")) >= 1)
    assert f"test key {AWS}" in ov_texts(fake_ov, "lab-session")
