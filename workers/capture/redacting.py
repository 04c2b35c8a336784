"""Capture redacts whatever reaches it before anything keeps it, and counts what was masked
(core.redaction).

The plugin redacts before it publishes; a producer without its rules (an old plugin, another
client) is redacted here, as each entry is read: the event (every text of every message), and
the payload a dead letter or a parked turn would keep, re-encoded from it. An entry that is no
event at all has its raw text redacted, since it is dead-lettered as it is. What capture writes to
OV is counted by the placeholders in it, per tenant and kind (``Keys.redactions``,
``ovstream_redactions_total``): the plugin's masks and capture's alike, never a value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec
import redis.asyncio as aioredis

from core.config import Settings
from core.events import encode
from core.redaction import PLACEHOLDER, Placeholders, redact_messages, redact_text
from workers.capture.plan import Entry, SessionRound
from workers.store.keys import Keys

TENANT_KIND_SEPARATOR = "|"
"""Between a tenant and a kind in a field of ``Keys.redactions`` (neither holds one)."""


def redact_entry(settings: Settings, entry: Entry) -> None:
    """Redact ``entry`` in place (its event and its payload) by its agent's policy."""
    if entry.event is not None:
        policy = settings.redaction_for(entry.event.agent_id)
        messages, kinds = redact_messages(entry.event.messages, policy, Placeholders())
        if kinds:
            entry.event = msgspec.structs.replace(entry.event, messages=messages)
            entry.payload = encode(entry.event)
    elif entry.payload is not None:
        policy = settings.redaction_for(None)
        if policy.mode != "off":
            redacted, kinds = redact_text(entry.payload.decode("utf-8", "replace"), policy.rules, Placeholders())
            if kinds:
                entry.payload = redacted.encode("utf-8")


def masked_in(plan: SessionRound) -> Counter[str]:
    """The placeholders (by kind) in what ``plan`` writes to OV."""
    kinds: Counter[str] = Counter()
    if plan.messages:  # every part: text, tool calls and their results
        for match in PLACEHOLDER.finditer(msgspec.json.encode(plan.messages).decode()):
            kinds[match.group(0)[1:-1].split(":", 1)[1].split("#", 1)[0]] += 1
    return kinds


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
