"""How capture workers split the turn streams among themselves (pure).

Every live worker reads the same sorted list of live workers, so the shares add up to the
number of streams without any coordination beyond the leases: each worker takes about
``streams / live`` free streams, the division's remainder going to the first names, and
hands its extras back when more workers join. Workers start on different streams (each
generation rotated by the worker's name), so a fleet starting together does not race for
stream 0.
"""

from __future__ import annotations

from core.shard_map import StreamShard


def fair_share(consumer: str, live: list[str], streams: int) -> int:
    """How many of ``streams`` the worker ``consumer`` should hold while ``live`` (sorted) are
    alive: ``streams / live``, the remainder going to the first names."""
    if consumer not in live:
        live = sorted([*live, consumer])
    base, extra = divmod(streams, len(live))
    return base + (1 if live.index(consumer) < extra else 0)


def preference(consumer: str, shards: list[StreamShard]) -> list[StreamShard]:
    """``shards`` in the order ``consumer`` tries them: each generation rotated by the name."""
    offset = sum(consumer.encode())
    out: list[StreamShard] = []
    for generation in sorted({s.generation for s in shards}):
        group = [s for s in shards if s.generation == generation]
        cut = offset % len(group)
        out += group[cut:] + group[:cut]
    return out
