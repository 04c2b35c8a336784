import hashlib

import pytest

from workers.store.keys import Keys, scope_of, shard_of


@pytest.mark.parametrize("sid", ["a", "0f8fad5b-d9cb-469f-a165-70867728950e", "x" * 64, "会话"])
@pytest.mark.parametrize("shards", [1, 4, 7, 1024])
def test_shard_is_stable_and_in_range(sid, shards):
    expected = int(hashlib.sha256(sid.encode()).hexdigest()[:8], 16) % shards
    assert shard_of(sid, shards) == expected
    assert 0 <= shard_of(sid, shards) < shards


def test_shards_spread_sessions():
    used = {shard_of(f"session-{i}", 4) for i in range(200)}
    assert used == {0, 1, 2, 3}


def test_session_keys_share_the_shard_hash_tag():
    k = Keys("ovs")
    tag = "{s3}"
    for key in (
        k.stream(3),
        k.applied(3, "u.a", "sid"),
        k.snapshot(3, "u.a", "sid"),
        k.commits(3, "u.a", "sid"),
        k.commit_generation(3, "u.a", "sid"),
    ):
        assert key.startswith("ovs:") and tag in key
    assert len({k.applied(3, "u.a", "sid"), k.snapshot(3, "u.a", "sid"), k.commits(3, "u.a", "sid")}) == 3


def test_scope_separates_agents_and_users():
    assert scope_of(None, "main") != scope_of(None, "other")
    assert scope_of("alice", "main") != scope_of("bob", "main")
