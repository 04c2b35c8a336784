"""Secrets (and, opted in, personal data) masked in what a turn carries, before anything stores it
(pure).

The rules are one file, ``rules.json``, read here and by the OpenClaw plugin (its build copies
it; ``clients/openclaw/src/redaction.ts`` is this module's twin, and both are tested against one
table, ``tests/redaction/cases.json``). A match becomes a typed placeholder, ``[secret:jwt#1]``
(``[personal:email#2]``), numbered per kind within a scope (``Placeholders``: one value keeps
its number, so the conversation still reads and the model can refer to it) and never holding
the value. A placeholder already in a text is left as it is, so redacting twice changes
nothing. Policy ``drop`` replaces a message holding one with a notice; ``off`` leaves it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

RULES_PATH = Path(__file__).with_name("rules.json")
RedactionMode = Literal["mask", "drop", "off"]
RuleClass = Literal["secret", "personal"]
PLACEHOLDER = re.compile(r"\[(?:secret|personal):[a-z0-9_]{1,40}#[0-9]{1,6}\]")
"""A placeholder a redaction wrote: never matched again."""
SKIPPED_KEYS = frozenset(
    {"role", "type", "id", "toolCallId", "toolUseId", "name", "toolName", "mimeType", "stopReason", "api"}
    | {"provider", "model", "timestamp", "data"}
)
"""Keys of a message whose values are structure (or an image's bytes), never what someone said."""
DROPPED_NOTICE = "[message withheld: it held {kinds}]"
PLACEHOLDERS_KEPT = 2000
"""Most values one ``Placeholders`` numbers; past it, numbering starts again (a new scope)."""


def luhn(digits: str) -> bool:
    """Whether a card number's digits (separators allowed) pass the Luhn check."""
    numbers = [int(c) for c in digits if c.isdigit()]
    if not 13 <= len(numbers) <= 19:
        return False
    total = 0
    for i, n in enumerate(reversed(numbers)):
        total += (n * 2 - 9 if n * 2 > 9 else n * 2) if i % 2 else n
    return total % 10 == 0


def iban(text: str) -> bool:
    """Whether an IBAN (spaces allowed) passes its mod-97 check."""
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


VALIDATORS: Mapping[str, Callable[[str], bool]] = {"luhn": luhn, "iban": iban}


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str
    rule_class: RuleClass
    regex: re.Pattern[str]
    group: int = 0
    validator: Callable[[str], bool] | None = None


def compile_rule(spec: Mapping[str, Any]) -> Rule:
    """A rule as ``rules.json`` (or a deployment's ``redactionCustomPatterns``) writes it."""
    flags = re.IGNORECASE if "i" in str(spec.get("flags", "")) else 0
    validator = spec.get("validator")
    if validator is not None and validator not in VALIDATORS:
        raise ValueError(f"redaction rule {spec.get('kind')!r}: unknown validator {validator!r}")
    kind = str(spec["kind"])
    if not re.fullmatch(r"[a-z0-9_]{1,40}", kind):
        raise ValueError(f"redaction rule kind {kind!r}: use 1-40 of a-z, 0-9, _")
    return Rule(
        kind=kind,
        rule_class="personal" if spec.get("class") == "personal" else "secret",
        regex=re.compile(str(spec["pattern"]), flags),
        group=int(spec.get("group", 0)),
        validator=VALIDATORS[validator] if validator else None,
    )


@cache
def bundled_rules() -> tuple[Rule, ...]:
    """The rules of ``rules.json``, in order."""
    return tuple(compile_rule(spec) for spec in json.loads(RULES_PATH.read_text("utf-8"))["rules"])


@dataclass(frozen=True, slots=True)
class Policy:
    """What is redacted, and how: every secret rule, the personal kinds opted in, custom rules."""

    mode: RedactionMode = "mask"
    personal: frozenset[str] = frozenset()
    custom: tuple[Rule, ...] = ()

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in bundled_rules() if r.rule_class == "secret" or r.kind in self.personal) + self.custom


@dataclass(slots=True)
class Placeholders:
    """Numbers per kind within one scope (a session, an event): one value, one number. Values are
    kept only as keyed digests under a key of this process's own."""

    numbers: dict[bytes, int] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    _key: bytes = field(default_factory=lambda: os.urandom(16))

    def of(self, rule: Rule, value: str) -> str:
        if len(self.numbers) >= PLACEHOLDERS_KEPT:
            self.numbers.clear()
            self.counts.clear()
        digest = hmac.new(self._key, f"{rule.kind}\0{value}".encode(), hashlib.sha256).digest()[:16]
        number = self.numbers.get(digest)
        if number is None:
            self.counts[rule.kind] += 1
            number = self.numbers[digest] = self.counts[rule.kind]
        return f"[{rule.rule_class}:{rule.kind}#{number}]"


def _spans(text: str, rules: Iterable[Rule]) -> list[tuple[int, int, Rule]]:
    """Where ``rules`` match ``text``, no two overlapping (the earlier, then the longer, wins) and
    none inside a placeholder."""
    protected = [m.span() for m in PLACEHOLDER.finditer(text)]
    found = []
    for rule in rules:
        for match in rule.regex.finditer(text):
            start, end = match.span(rule.group) if match.group(rule.group) is not None else match.span()
            if end <= start or (rule.validator is not None and not rule.validator(text[start:end])):
                continue
            found.append((start, end, rule))
    found.sort(key=lambda f: (f[0], -f[1]))
    kept: list[tuple[int, int, Rule]] = []
    for start, end, rule in found:
        if kept and start < kept[-1][1]:
            continue
        if any(start < p_end and p_start < end for p_start, p_end in protected):
            continue
        kept.append((start, end, rule))
    return kept


def redact_text(text: str, rules: Iterable[Rule], placeholders: Placeholders) -> tuple[str, Counter[str]]:
    """``text`` with every match masked, and the kinds masked (counted)."""
    spans = _spans(text, rules)
    if not spans:
        return text, Counter()
    out, at, kinds = [], 0, Counter[str]()
    for start, end, rule in spans:
        out += [text[at:start], placeholders.of(rule, text[start:end])]
        kinds[rule.kind] += 1
        at = end
    out.append(text[at:])
    return "".join(out), kinds


def _walk(value: Any, rules: tuple[Rule, ...], placeholders: Placeholders, kinds: Counter[str]) -> Any:
    if isinstance(value, str):
        redacted, found = redact_text(value, rules, placeholders)
        kinds.update(found)
        return redacted
    if isinstance(value, list):
        return [_walk(v, rules, placeholders, kinds) for v in value]
    if isinstance(value, dict):
        return {k: v if k in SKIPPED_KEYS else _walk(v, rules, placeholders, kinds) for k, v in value.items()}
    return value


def redact_messages(
    messages: list[dict[str, Any]], policy: Policy, placeholders: Placeholders
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every text a turn's messages carry (text, tool call arguments, tool results) redacted by
    ``policy``; the kinds found. A message is a new dict only when something in it changed."""
    if policy.mode == "off":
        return messages, Counter()
    rules, total = policy.rules, Counter[str]()
    out = []
    for message in messages:
        kinds = Counter[str]()
        redacted = _walk(message, rules, placeholders, kinds)
        if kinds and policy.mode == "drop":
            redacted = _withheld(message, kinds)
        total.update(kinds)
        out.append(redacted if kinds else message)
    return out, total


def _withheld(message: dict[str, Any], kinds: Counter[str]) -> dict[str, Any]:
    """The message with its content replaced by a notice (its role, ids and kind kept, so a tool
    call still pairs with its result)."""
    notice = DROPPED_NOTICE.format(kinds=", ".join(sorted(kinds)))
    kept = {k: v for k, v in message.items() if k in SKIPPED_KEYS}
    return {**kept, "content": [{"type": "text", "text": notice}]}


PERSONAL_KINDS = frozenset(r.kind for r in bundled_rules() if r.rule_class == "personal")


def check_personal(kinds: Iterable[str]) -> None:
    """Refuse a personal kind no rule knows (a typo would mask nothing, silently)."""
    unknown = sorted(set(kinds) - PERSONAL_KINDS)
    if unknown:
        raise ValueError(f"unknown personal data kinds {unknown}; known: {sorted(PERSONAL_KINDS)}")


def custom_rules(specs: Iterable[Mapping[str, Any]]) -> tuple[Rule, ...]:
    """A deployment's own patterns, compiled (a bad one is refused with what is wrong)."""
    rules = []
    for spec in specs:
        try:
            rules.append(compile_rule({**spec, "class": "secret"}))
        except (KeyError, re.error, ValueError, TypeError) as exc:
            raise ValueError(f"redaction pattern {dict(spec)!r}: {exc}") from None
    return tuple(rules)


@cache
def policy(mode: RedactionMode, personal: tuple[str, ...], custom: tuple[tuple[tuple[str, Any], ...], ...]) -> Policy:
    """The ``Policy`` of a deployment's settings (compiled once per distinct setting)."""
    return Policy(mode=mode, personal=frozenset(personal), custom=custom_rules(dict(c) for c in custom))
