"""Everything a Redis holds, read back as text, for tests that a value is kept nowhere."""

from __future__ import annotations

from typing import Any

from workers.store.connection import text

READERS = {
    "string": lambda c, k: c.get(k),
    "hash": lambda c, k: c.hgetall(k),
    "stream": lambda c, k: c.xrange(k),
    "list": lambda c, k: c.lrange(k, 0, -1),
    "zset": lambda c, k: c.zrange(k, 0, -1),
    "set": lambda c, k: c.smembers(k),
}


def key_names(client: Any) -> set[str]:
    return {text(k) for k in client.scan_iter(count=1000)}


def values(client: Any, *, leave_out: frozenset[str] = frozenset()) -> bytes:
    """Every key's value (by its type, uncompressed), but those of the keys in ``leave_out``."""
    read = []
    for key in client.scan_iter(count=1000):
        if text(key) in leave_out:
            continue
        reader = READERS.get(text(client.type(key)))
        read.append(repr(reader(client, key)).encode() if reader else b"")
    return b"\n".join(read)
