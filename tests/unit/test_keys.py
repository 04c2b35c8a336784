import hashlib

import fakeredis
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from core.session import tenant_and_agent
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


@given(
    tenant=st.none() | st.text(st.characters(blacklist_characters=".", blacklist_categories=("Cs",)), min_size=1),
    agent_id=st.text(min_size=1),
)
def test_a_scope_reads_back_as_its_tenant_and_agent(tenant: str | None, agent_id: str) -> None:
    assume(tenant != "-")  # "-" is the scope's word for no tenant
    assert tenant_and_agent(scope_of(tenant, agent_id)) == (tenant, agent_id)


@pytest.mark.parametrize("sid", ["plain", "with*glob?[chars]", "back\\slash"])
def test_the_commits_glob_finds_the_sessions_commits_under_every_scope_and_no_other(sid: str) -> None:
    keys, redis = Keys("p"), fakeredis.FakeRedis(decode_responses=True)
    scopes = {scope_of(None, "main"), scope_of("alice", "ops.bot")}
    for scope in scopes:
        redis.hset(keys.commits(3, scope, sid), "c", "x")
    redis.hset(keys.commits(3, scope_of(None, "main"), sid + "-other"), "c", "x")
    redis.hset(keys.snapshot(3, scope_of(None, "main"), sid), "c", "x")
    found = {keys.scope_in("commits", k, 3, sid) for k in redis.scan_iter(match=keys.session_glob("commits", 3, sid))}
    assert found == scopes


@pytest.mark.parametrize(
    ("key", "family"),
    [
        ("ovstream:{s3}:applied:main:sess-1", "applied"),
        ("ovstream:{s0}:snapshot:u:main:s", "snapshot"),
        ("ovstream:{s1}:turns", "turns"),
        ("ovstream:{s1}:turns:g2.5", "turns"),
        ("ovstream:{s1}:lease:capture", "lease:capture"),
        ("ovstream:{s1}:lease:capture:epoch:g1.3", "lease:capture"),
        ("ovstream:extraction-repair:commit_abc_1", "extraction-repair"),
        ("ovstream:extraction-repair-turn:alice", "extraction-repair-turn"),
        ("ovstream:dlq", "dlq"),
        ("ovstream:health:capture-1", "health"),
        ("ovstream-demo:dlq", None),  # another deployment's
        ("rq:job:commit_1", None),
        ("ovstream:", None),
    ],
)
def test_every_key_has_its_family(key, family):
    assert Keys("ovstream").family_of(key) == family


def test_the_family_of_each_session_key_is_its_kind():
    from core.session import SessionAddress

    ks = Keys("ovstream").session(SessionAddress("s", "main", "u"), 4)
    families = {Keys("ovstream").family_of(k) for k in (ks.applied, ks.snapshot, ks.commits, ks.last_turn)}
    assert families == {"applied", "snapshot", "commits", "last-turn"}
