"""core.redaction: the rules against one table of cases (the plugin's test reads the same table),
and what any redaction must keep: idempotence, one number per value, no value left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.redaction import (
    Placeholders,
    Policy,
    bundled_rules,
    compile_rule,
    iban,
    luhn,
    redact_messages,
    redact_text,
)

CASES = json.loads((Path(__file__).parents[1] / "redaction" / "cases.json").read_text("utf-8"))["cases"]
AWS = "AKIA" + "IOSFODNN7EXAMPLE"


@pytest.mark.parametrize("case", CASES, ids=[c["text"][:40] for c in CASES])
def test_the_table(case) -> None:
    policy = Policy(personal=frozenset(case.get("personal", ())))
    assert redact_text(case["text"], policy.rules, Placeholders())[0] == case["expect"]


def test_every_secret_kind_has_a_case_that_masks_it() -> None:
    masked = {kind for c in CASES for kind in redact_text(c["text"], Policy().rules, Placeholders())[1]}
    kinds = {r.kind for r in bundled_rules() if r.rule_class == "secret"}
    assert kinds <= masked, kinds - masked


@given(st.text(max_size=200), st.sampled_from([c["text"] for c in CASES]))
def test_redacting_twice_changes_nothing_more(noise: str, case: str) -> None:
    rules, numbers = Policy(personal=frozenset({"email", "phone", "card_number", "iban"})).rules, Placeholders()
    once, _ = redact_text(noise + " " + case, rules, numbers)
    assert redact_text(once, rules, Placeholders()) == (once, {})


def test_one_value_keeps_its_number_within_a_scope_and_none_is_kept_as_text() -> None:
    numbers = Placeholders()
    first, kinds = redact_text(f"key {AWS}", Policy().rules, numbers)
    later, _ = redact_text(f"again {AWS}", Policy().rules, numbers)
    assert first == "key <redacted:aws_access_key#1>" and later == "again <redacted:aws_access_key#1>"
    assert kinds == {"aws_access_key": 1}
    assert AWS.encode() not in repr(numbers.numbers).encode()  # digests under a key of this process


def test_every_text_a_turn_carries_is_redacted_and_drop_withholds_the_message() -> None:
    messages = [
        {"role": "user", "content": f"my key {AWS}"},
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c1", "name": "sh", "arguments": {"cmd": f"export K={AWS}"}}],
        },
        {"role": "toolResult", "toolCallId": "c1", "content": [{"type": "text", "text": "DB_PASSWORD=hunter22"}]},
        {"role": "user", "content": "nothing here"},
    ]
    masked, kinds = redact_messages(messages, Policy(), Placeholders())
    assert kinds == {"aws_access_key": 2, "password": 1}
    assert AWS not in json.dumps(masked) and "hunter22" not in json.dumps(masked)
    assert masked[1]["content"][0]["arguments"]["cmd"] == "export K=<redacted:aws_access_key#1>"
    assert masked[3] is messages[3]  # untouched
    dropped, _ = redact_messages(messages, Policy(mode="drop"), Placeholders())
    assert dropped[2] == {
        "role": "toolResult",
        "toolCallId": "c1",
        "content": [{"type": "text", "text": "[message withheld: it held password]"}],
    }
    assert redact_messages(messages, Policy(mode="off"), Placeholders()) == (messages, {})


def test_custom_rules_and_their_errors() -> None:
    rule = compile_rule({"kind": "ticket", "pattern": "TCK-[0-9]{6}"})
    assert redact_text("see TCK-123456", Policy(custom=(rule,)).rules, Placeholders())[0] == "see <redacted:ticket#1>"
    with pytest.raises(ValueError, match="kind"):
        compile_rule({"kind": "Bad Kind", "pattern": "x"})
    with pytest.raises(ValueError, match="validator"):
        compile_rule({"kind": "x", "pattern": "x", "validator": "nope"})


@pytest.mark.parametrize(
    ("number", "valid"),
    [
        ("4111 1111 1111 1111", True),
        ("4111 1111 1111 1112", False),
        ("79927398713", False),
        ("5500-0000-0000-0004", True),
    ],
)
def test_luhn(number: str, valid: bool) -> None:
    assert luhn(number) is valid


@pytest.mark.parametrize(
    ("text", "valid"),
    [("DE89 3704 0044 0532 0130 00", True), ("GB82WEST12345698765432", True), ("DE89 3704 0044 0532 0130 01", False)],
)
def test_iban(text: str, valid: bool) -> None:
    assert iban(text) is valid
