"""Capture redacts whatever reaches it before anything keeps it, and counts what was masked
(core.redaction), and what it wrote (the tenants' usage: ``count_usage``).

The plugin redacts before it publishes; for a producer without its rules (an old plugin, another
client) capture redacts what it keeps: what a turn writes to OV (``plan.redacted``: the new
messages only, as OV messages, so a tool call's input from an earlier turn too) and the payload
of a dead letter or a parked turn (``redacted_payload``: every message, or the raw text of an
entry that is no event). What capture writes to OV is counted by the placeholders in it, per
tenant and kind (``Keys.redactions``, ``ovstream_redactions_total``): the plugin's masks and
capture's alike, never a value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec
import redis.asyncio as aioredis

from core.config import Settings
from core.events import encode
from core.messages.tokens import estimate_message_tokens
from core.redaction import PLACEHOLDER, Placeholders, redact_messages, redact_text
from workers.capture.plan import Entry, SessionRound
from workers.store.keys import Keys
from workers.store.usage import TALLY

TENANT_KIND_SEPARATOR = "|"
"""Between a tenant and a kind in a field of ``Keys.redactions`` (neither holds one)."""


def redacted_payload(settings: Settings, entry: Entry) -> bytes | None:
    """``entry``'s payload as a dead letter (or a parked turn) may keep it: its event's every
    message redacted by its agent's policy, or, not an event at all, its raw text."""
    if entry.event is not None:
        policy = settings.redaction_for(entry.session.agent_id if entry.session else entry.event.agent_id)
        messages, kinds = redact_messages(entry.event.messages, policy, Placeholders())
        return encode(msgspec.structs.replace(entry.event, messages=messages)) if kinds else entry.payload
    policy = settings.redaction_for(None)
    if entry.payload is None or policy.mode == "off":
        return entry.payload
    redacted, kinds = redact_text(entry.payload.decode("utf-8", "replace"), policy.rules, Placeholders())
    return redacted.encode("utf-8") if kinds else entry.payload


def masked_in(plan: SessionRound) -> Counter[str]:
    """The placeholders (by kind) in what ``plan`` writes to OV."""
    kinds: Counter[str] = Counter()
    if plan.messages:  # every part: text, tool calls and their results
        for match in PLACEHOLDER.finditer(msgspec.json.encode(plan.messages).decode()):
            kinds[match.group(0)[1:-1].split(":", 1)[1].split("#", 1)[0]] += 1
    return kinds


def count_usage(plans: Iterable[SessionRound]) -> None:
    """What ``plans`` wrote to OV, in the tenants' usage (workers.store.usage, flushed with the
    worker's beat): turns, messages and their estimated tokens."""
    for plan in plans:
        messages = plan.messages
        if messages:
            tenant = plan.session.address.tenant
            TALLY.add(tenant, "turns_captured", len(plan.units))
            TALLY.add(tenant, "messages_captured", len(messages))
            TALLY.add(tenant, "tokens_captured", estimate_message_tokens(messages))


async def count_masked(redis: aioredis.Redis, settings: Settings, plans: Iterable[SessionRound]) -> None:
    """Add what ``plans`` wrote masked to the tenant's counts. After the ack, not in it: a crash
    between the two leaves a count short, never a turn."""
    counts: Counter[str] = Counter()
    for plan in plans:
        tenant = plan.session.address.tenant or "-"
        for kind, n in masked_in(plan).items():
            counts[f"{tenant}{TENANT_KIND_SEPARATOR}{kind}"] += n
    if counts:
        async with redis.pipeline(transaction=False) as pipe:
            for field, n in counts.items():
                pipe.hincrby(Keys(settings.key_prefix).redactions(), field, n)
            await pipe.execute()
