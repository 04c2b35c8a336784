"""The shard map's rules (core.shard_map): where a session's events go across reshards, which old
streams a new one waits for, and which reshards are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.session import shard_of
from core.shard_map import ReshardRefused, ShardMap, StreamShard, resharded

session_ids = st.text(min_size=1, max_size=40)
tag_counts = st.integers(min_value=1, max_value=16)
factors = st.integers(min_value=1, max_value=8)


@given(session_ids, tag_counts, factors, factors)
def test_a_session_keeps_its_tag_through_any_reshards(sid: str, tags: int, first: int, second: int) -> None:
    """Its records never move: every stream it is ever on carries its tag's hash tag."""
    start = ShardMap(tags)
    maps = [start]
    for factor in (first, second):
        if maps[-1].shards != tags * factor:
            finished = ShardMap(tags, maps[-1].generation, maps[-1].shards)  # the previous drained
            maps.append(resharded(finished, tags * factor))
    for shard_map in maps:
        stream = shard_map.stream_of(sid)
        assert stream.tag == shard_map.tag_of(sid) == shard_of(sid, tags)
        assert stream.holds(sid) and stream.home_of(sid) == stream
        # its previous stream is among the ones its new stream waits for
        assert all(old in shard_map.predecessors(stream) for old in shard_map.streams_of(sid)[:-1])


@given(session_ids, tag_counts, factors)
def test_while_draining_a_session_is_on_its_old_stream_then_its_new_one(sid: str, tags: int, factor: int) -> None:
    shard_map = resharded(ShardMap(tags), tags * (factor + 1))
    old, new = shard_map.streams_of(sid)
    assert (old.generation, new.generation) == (0, 1)
    assert old.number == shard_of(sid, tags) and new.number == shard_of(sid, tags * (factor + 1))


def test_a_new_stream_waits_for_the_old_streams_of_its_tag_only() -> None:
    shard_map = resharded(ShardMap(2), 6)  # generation 1: 6 streams over 2 tags
    waits = {s.number: [p.number for p in shard_map.predecessors(s)] for s in shard_map.current()}
    assert waits == {0: [0], 1: [1], 2: [0], 3: [1], 4: [0], 5: [1]}
    assert all(shard_map.predecessors(s) == [] for s in shard_map.draining())  # the old ones wait for none
    assert ShardMap(2, 1, 6).predecessors(StreamShard(1, 3, 6, 2)) == []  # nothing drains: nothing to wait for


@pytest.mark.parametrize(
    ("shard_map", "shards", "expected"),
    [
        (ShardMap(4), 8, ShardMap(4, 1, 8, (0, 4))),
        (ShardMap(4), 12, ShardMap(4, 1, 12, (0, 4))),
        (ShardMap(4, 1, 8), 4, ShardMap(4, 2, 4, (1, 8))),
        (ShardMap(4, 3, 16), 8, ShardMap(4, 4, 8, (3, 16))),
        (ShardMap(1), 3, ShardMap(1, 1, 3, (0, 1))),
        (ShardMap(4), 6, "must be a multiple of 4"),
        (ShardMap(4), 2, "must be a multiple of 4"),
        (ShardMap(4), 0, "must be a positive count"),
        (ShardMap(4, 1, 8), 8, "already runs 8 shards"),
        (ShardMap(4, 1, 8, (0, 4)), 16, "generation 0 (4 shards) is still draining"),
    ],
)
def test_reshards(shard_map: ShardMap, shards: int, expected: ShardMap | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(ReshardRefused) as refused:
            resharded(shard_map, shards)
        assert expected in str(refused.value)
    else:
        assert resharded(shard_map, shards) == expected


def test_streams_are_named_by_their_generation_and_number() -> None:
    assert [str(s) for s in ShardMap(2).current()] == ["0", "1"]
    assert [str(s) for s in ShardMap(2, 3, 4).current()] == ["g3.0", "g3.1", "g3.2", "g3.3"]
    assert [s.tag for s in ShardMap(2, 3, 4).current()] == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("shard_map", "left_behind"),
    [
        (ShardMap(4), []),  # never resharded: generation 0 is current
        (ShardMap(4, 1, 8, (0, 4)), []),  # generation 0 still drains: capture reads it
        (ShardMap(4, 1, 8), [0, 1, 2, 3]),
        (ShardMap(4, 2, 4, (1, 8)), [0, 1, 2, 3]),  # long gone while a later generation drains
    ],
)
def test_generation_0_is_left_behind_once_it_is_neither_current_nor_draining(
    shard_map: ShardMap, left_behind: list[int]
) -> None:
    first = shard_map.first_left_behind()
    assert [s.number for s in first] == left_behind
    assert all(s.generation == 0 and s.tag == s.number for s in first)
