"""What capture did with each import of ``openclaw ovstream import`` (workers.capture.imports
records it, in the fenced write that acks the entry): the import's transcript written whole
into a session OV held none of (``written``), written after an interrupted write of it had put
part of it there (``partly``), or nothing written because the session was known already
(``already``: captured before, or held by OV). Kept per session (``SessionKeys.imports``), for
the session state's lifetime, under the import run that sent it: the run asks for its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec
import redis.asyncio as aioredis

from core.config import Settings
from core.session import SessionAddress
from workers.store.keys import session_keys

ImportOutcome = Literal["written", "partly", "already"]


class ImportRecord(msgspec.Struct, frozen=True, kw_only=True):
    run: str | None
    """The import run that sent the entry (``TurnEvent.import_run``)."""
    entry: str
    """The stream entry capture applied."""
    outcome: ImportOutcome
    messages: int = 0
    """OV messages this entry wrote (0 when ``already``)."""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(ImportRecord).decode


def encode_record(record: ImportRecord) -> str:
    return _encode(record).decode()


async def read_import_records(
    redis: aioredis.Redis, settings: Settings, wanted: Sequence[tuple[SessionAddress, str]]
) -> list[tuple[ImportRecord | None, bool]]:
    """For each (session, import event id): its record (None where capture has none yet, or one
    another release wrote that this one does not read), and whether capture knows the session
    (keeps its applied state: an import of it now would write nothing)."""
    async with redis.pipeline(transaction=False) as pipe:
        for address, event_id in wanted:
            keys = session_keys(settings, address)
            pipe.hget(keys.imports, event_id)
            pipe.exists(keys.applied)
        raws = await pipe.execute()
    out: list[tuple[ImportRecord | None, bool]] = []
    for raw, known in zip(raws[::2], raws[1::2]):
        try:
            record = None if raw is None else _decode(raw)
        except msgspec.DecodeError:
            record = None
        out.append((record, bool(known)))
    return out
