"""Secrets (and, opted in, personal data) masked in what a turn carries, before anything stores it
(pure).

The rules are one file, ``rules.json``, read here and by the OpenClaw plugin (its build copies
it; ``clients/openclaw/src/redaction.ts`` is this module's twin, and both are tested against one
table, ``tests/redaction/cases.json``). A match becomes a typed placeholder, ``<redacted:jwt#1>``
(``<redacted:email#2>``), numbered per kind within a scope (``Placeholders``: one value keeps
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
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

import re2  # type: ignore[import-untyped]

RULES_PATH = Path(__file__).with_name("rules.json")
RedactionMode = Literal["mask", "drop", "off"]
RuleClass = Literal["secret", "personal"]
PLACEHOLDER = re.compile(r"<redacted:[a-z0-9_]{1,40}#[0-9]{1,6}>")
"""A placeholder a redaction wrote: never matched again. Its shape is one OV 0.5.2's own session
privacy extraction leaves alone (``openviking/privacy/session_extractor.py``: it reads
``secret:`` in ``[secret:jwt#1]`` as a key and a bracketed value after ``PASSWORD=`` as a
credential, and rewrites both into ``{{ov_privacy:...}}`` references; docs/OV-NOTES.md)."""
SKIPPED_KEYS = frozenset(
    {"role", "type", "id", "toolCallId", "toolUseId", "name", "toolName", "mimeType", "stopReason", "api"}
    | {"provider", "model", "timestamp", "data", "tool_id", "tool_name", "tool_status", "image_url", "context_type"}
    | {"created_at", "peer_id", "turn_id", "uri"}
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
    hints: tuple[str, ...] = ()
    """Lowercase strings one of which a text (lowercased) holds whenever the pattern can match
    it: a text without any is not scanned (most text holds no secret, and ``in`` is cheap)."""


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
        hints=tuple(str(h).lower() for h in spec.get("hints", ())),
    )


@cache
def bundled_rules() -> tuple[Rule, ...]:
    """The rules of ``rules.json``, in order."""
    return tuple(compile_rule(spec) for spec in json.loads(RULES_PATH.read_text("utf-8"))["rules"])


@dataclass(frozen=True)
class Policy:
    """What is redacted, and how: every secret rule, the personal kinds opted in, custom rules."""

    mode: RedactionMode = "mask"
    personal: frozenset[str] = frozenset()
    custom: tuple[Rule, ...] = ()

    @cached_property
    def rules(self) -> RuleSet:
        """The rules, with their hints' index: built once per policy (``policy`` caches those)."""
        chosen = [r for r in bundled_rules() if r.rule_class == "secret" or r.kind in self.personal]
        return RuleSet.of([*chosen, *self.custom])


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
        return f"<redacted:{rule.kind}#{number}>"


@dataclass(frozen=True, slots=True)
class HintIndex:
    """Every hint of a set of rules, found in one pass of RE2 (a DFA: about 2 ns a byte, where
    Python's ``re`` tries each alternative at each position, and ``in`` scans once per hint)."""

    pattern: Any
    """RE2 pattern of every hint, case-insensitive, the longer first."""
    within: Mapping[str, frozenset[str]]
    """A hint -> the hints it holds (itself too): found, each of those counts as found."""

    @classmethod
    def of(cls, rules: Iterable[Rule]) -> HintIndex:
        hints = sorted({h for r in rules for h in r.hints}, key=lambda h: (-len(h), h))
        within = {h: frozenset(o for o in hints if o in h) for h in hints}
        return cls(re2.compile("(?i)" + "|".join(re.escape(h) for h in hints)) if hints else None, within)

    def present(self, text: str) -> set[str]:
        if self.pattern is None:
            return set()
        found: set[str] = set()
        for match in self.pattern.finditer(text):
            found |= self.within.get(match.group().lower(), frozenset())
        return found


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Rules, in order, with their hints' index (built once: a ``Policy`` keeps its own)."""

    rules: tuple[Rule, ...]
    index: HintIndex

    @classmethod
    def of(cls, rules: Iterable[Rule]) -> RuleSet:
        kept = tuple(rules)
        return cls(kept, HintIndex.of(kept))


def _spans(text: str, rules: RuleSet) -> list[tuple[int, int, Rule]]:
    """Where ``rules`` match ``text``, no two overlapping (the earlier, then the longer, wins) and
    none inside a placeholder. A rule with hints is tried only when the text holds one."""
    present = rules.index.present(text)
    found = []
    for rule in rules.rules:
        if rule.hints and present.isdisjoint(rule.hints):
            continue
        for match in rule.regex.finditer(text):
            start, end = match.span(rule.group) if match.group(rule.group) is not None else match.span()
            if end <= start or (rule.validator is not None and not rule.validator(text[start:end])):
                continue
            found.append((start, end, rule))
    if not found:
        return []
    protected = [m.span() for m in PLACEHOLDER.finditer(text)]
    found.sort(key=lambda f: (f[0], -f[1]))
    kept: list[tuple[int, int, Rule]] = []
    for start, end, rule in found:
        if kept and start < kept[-1][1]:
            continue
        if any(start < p_end and p_start < end for p_start, p_end in protected):
            continue
        kept.append((start, end, rule))
    return kept


def redact_text(text: str, rules: RuleSet | Iterable[Rule], placeholders: Placeholders) -> tuple[str, Counter[str]]:
    """``text`` with every match masked, and the kinds masked (counted)."""
    spans = _spans(text, rules if isinstance(rules, RuleSet) else RuleSet.of(rules))
    if not spans:
        return text, Counter()
    out, at, kinds = [], 0, Counter[str]()
    for start, end, rule in spans:
        out += [text[at:start], placeholders.of(rule, text[start:end])]
        kinds[rule.kind] += 1
        at = end
    out.append(text[at:])
    return "".join(out), kinds


def _walk(value: Any, rules: RuleSet, placeholders: Placeholders, kinds: Counter[str]) -> Any:
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


def redact_from(
    messages: list[dict[str, Any]], start: int, policy: Policy, placeholders: Placeholders
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """``messages`` with those from ``start`` on redacted (the ones before as they are): what a
    turn adds to a transcript, where the rest was redacted when it was new."""
    if policy.mode == "off" or start >= len(messages):
        return messages, Counter()
    new, kinds = redact_messages(messages[start:], policy, placeholders)
    return (messages[:start] + new, kinds) if kinds else (messages, kinds)


SESSIONS_NUMBERED = 4096
"""Sessions whose placeholder numbering one process keeps (the least recently used go first)."""


class SessionPlaceholders:
    """One ``Placeholders`` per session, the most recently used ``SESSIONS_NUMBERED``: a value keeps
    its number across the session's turns while the process lives."""

    def __init__(self, most: int = SESSIONS_NUMBERED) -> None:
        self._sessions: dict[str, Placeholders] = {}
        self._most = most

    def of(self, session: str) -> Placeholders:
        found = self._sessions.pop(session, None) or Placeholders()
        if len(self._sessions) >= self._most:
            del self._sessions[next(iter(self._sessions))]
        self._sessions[session] = found
        return found


def withheld_notice(kinds: Iterable[str]) -> str:
    """What a message withheld (policy ``drop``) says instead of its content."""
    return DROPPED_NOTICE.format(kinds=", ".join(sorted(set(kinds))))


def _withheld(message: dict[str, Any], kinds: Counter[str]) -> dict[str, Any]:
    """The message with its content replaced by a notice (its role, ids and kind kept, so a tool
    call still pairs with its result)."""
    notice = withheld_notice(kinds)
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
