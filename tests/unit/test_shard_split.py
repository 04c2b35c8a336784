"""core.shard_split: the shares of live workers add up to the streams, and workers start apart."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.shard_map import StreamShard
from core.shard_split import fair_share, preference


@pytest.mark.parametrize(
    ("consumer", "live", "streams", "share"),
    [
        ("a", ["a"], 4, 4),
        ("a", [], 4, 4),  # not yet in the list: counted as live
        ("a", ["a", "b"], 4, 2),
        ("a", ["a", "b", "c"], 4, 2),  # the remainder goes to the first names
        ("b", ["a", "b", "c"], 4, 1),
        ("c", ["a", "b", "c"], 4, 1),
        ("e", ["a", "b", "c", "d"], 4, 0),  # more workers than streams
    ],
)
def test_fair_share(consumer: str, live: list[str], streams: int, share: int) -> None:
    assert fair_share(consumer, live, streams) == share


@given(st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=12), st.integers(1, 64))
def test_the_shares_of_the_live_workers_add_up_to_the_streams(names: set[str], streams: int) -> None:
    live = sorted(names)
    assert sum(fair_share(name, live, streams) for name in live) == streams


def test_preference_rotates_each_generation_by_name_and_keeps_generations_in_order() -> None:
    shards = [StreamShard(0, n, 4, 4) for n in range(4)] + [StreamShard(1, n, 8, 4) for n in range(8)]
    for name in ("a", "worker-7", "host-1234-abcdef"):
        order = preference(name, shards)
        assert sorted(order, key=lambda s: (s.generation, s.number)) == sorted(
            shards, key=lambda s: (s.generation, s.number)
        )
        assert [s.generation for s in order] == [0] * 4 + [1] * 8
    assert {preference(n, shards)[0] for n in ("a", "b", "c", "d")} == {StreamShard(0, n, 4, 4) for n in range(4)}
