"""Subagents over the RPC: a spawn prepared, rolled back and ended; a forked child's context
starting from its parent's. Real redis-server, FakeOV."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from core.ids import ov_session_id
from core.session import SessionAddress
from tests.rpc.test_assemble import oc_turns, ov_turns
from workers.cli.commits import cli_commits
from workers.store.keys import Keys
from workers.store.lineage import read_lineage

pytestmark = pytest.mark.redis

PARENT = "11111111-1111-4111-8111-111111111111"
CHILD = "22222222-2222-4222-8222-222222222222"
PARENT_KEY = "agent:main:main"
CHILD_KEY = "agent:main:subagent:helper"
LINEAGE_AT = SessionAddress(ov_session_id("", CHILD_KEY), "main", None)
"""A child's lineage is kept under its session key: the host prepares an isolated spawn before
the child has a sessionId."""
SPAWNING_TURN = oc_turns("please spawn a helper for the logs", "spawning one")


def spawn(mode: str = "fork", **extra: Any) -> dict[str, Any]:
    return {
        "parentSessionKey": PARENT_KEY,
        "childSessionKey": CHILD_KEY,
        "contextMode": mode,
        "parentSessionId": PARENT,
        "childSessionId": CHILD,
        **extra,
    }


def child_call(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"sessionId": CHILD, "sessionKey": CHILD_KEY, "messages": messages, "prompt": "go", **extra}


def texts(answer: dict[str, Any]) -> list[str]:
    out = []
    for message in answer["messages"]:
        content = message.get("content")
        out.append(content if isinstance(content, str) else " ".join(b.get("text", "") for b in content))
    return out


async def lineage(rpc: Any) -> Any:
    return await read_lineage(rpc.app.state.services.redis, rpc.settings, LINEAGE_AT)


FROM_OV = ["parent q0 (OV)", "parent a0 (OV)", "parent q1 (OV)", "parent a1 (OV)"]
"""The parent's turns as its OV session holds them: told apart from its transcript's, so that
a test sees which of the two a context was built from."""


async def parent_with_a_snapshot(rpc: Any) -> list[dict[str, Any]]:
    """The parent: two turns in OV and captured, its snapshot stored; its transcript."""
    await rpc.ov.add_messages(PARENT, ov_turns(*FROM_OV))
    rpc.mark_captured(PARENT, 4)
    transcript = oc_turns("parent q0", "parent a0", "parent q1", "parent a1")
    answer = await rpc.assemble({"sessionId": PARENT, "sessionKey": PARENT_KEY, "messages": transcript, "prompt": "x"})
    assert answer.status_code == 200, answer.text
    return transcript


async def test_a_fork_starts_from_the_parents_context_and_grows_with_its_own_turns(rpc: Any) -> None:
    parent_transcript = await parent_with_a_snapshot(rpc)
    prepared = await rpc.client.post("/v1/subagents/prepare", json=spawn())
    assert prepared.status_code == 200, prepared.text
    assert prepared.json() == {
        "ok": True,
        "childSession": CHILD,
        "parentSession": PARENT,
        "contextMode": "fork",
        "forkBase": True,
    }

    # the child's first assemble: its transcript is the fork's copy (the parent's, with the
    # spawning turn the parent's snapshot does not have yet)
    copy = [*parent_transcript, *SPAWNING_TURN]
    first = await rpc.assemble(child_call(copy, forked=True))
    assert first.status_code == 200, first.text
    said = texts(first.json())
    assert said == [*FROM_OV, *texts({"messages": SPAWNING_TURN})]  # the parent's from its snapshot
    assert (await lineage(rpc)).fork_at == len(copy)
    assert CHILD not in rpc.fake.sessions  # nothing of the parent written to the child's OV session

    # the child's own first turn captured (its records hold only its own turn), then a second
    # turn not captured yet: parent's, copied, child's records, child's tail; nothing twice
    await rpc.ov.add_messages(CHILD, ov_turns("child q0", "child a0"))
    rpc.mark_captured(CHILD, len(copy) + 2)
    plain = await rpc.assemble(child_call([*copy, *oc_turns("child q0", "child a0")]))
    assert plain.status_code == 200  # (stores the child's own snapshot, as capture would)
    transcript = [*copy, *oc_turns("child q0", "child a0", "child q1", "child a1")]
    later = await rpc.assemble(child_call(transcript, forked=True))
    said = texts(later.json())
    assert said[:6] == [*FROM_OV, *texts({"messages": SPAWNING_TURN})]
    assert said[-4:] == ["child q0", "child a0", "child q1", "child a1"]
    assert len(said) == len(set(said)) == 10
    assert "child q0" not in " ".join(m["parts"][0]["text"] for m in rpc.fake.sessions[PARENT].messages)


async def test_a_forks_copied_turns_survive_the_host_passing_back_what_assemble_answered(rpc: Any) -> None:
    # The real host calls assemble again with the messages the first assemble answered (fewer
    # than its transcript): the spawning turn must still reach the model, every time.
    parent_transcript = await parent_with_a_snapshot(rpc)
    await rpc.client.post("/v1/subagents/prepare", json=spawn())
    copy = [*parent_transcript, *SPAWNING_TURN]
    first = await rpc.assemble(child_call(copy, forked=True))
    expected = [*FROM_OV, *texts({"messages": SPAWNING_TURN})]
    assert texts(first.json()) == expected
    answered = first.json()["messages"]
    # passed back whole, or only its end (the host trims what it keeps): by position, the copy
    # would be gone (the snapshot reflects 4 of them, and 3 were passed)
    for passed_back in (answered, answered[-3:], answered[-3:]):
        again = await rpc.assemble(child_call(passed_back, forked=True))
        assert again.status_code == 200, again.text
        assert texts(again.json()) == expected
    assert (await lineage(rpc)).fork_at == len(copy)


async def test_an_isolated_child_gets_nothing_of_its_parent(rpc: Any) -> None:
    await parent_with_a_snapshot(rpc)
    prepared = await rpc.client.post("/v1/subagents/prepare", json=spawn("isolated"))
    assert prepared.json()["forkBase"] is False and (await lineage(rpc)).mode == "isolated"
    transcript = oc_turns("research the logs")
    answer = await rpc.assemble(child_call(transcript, forked=True))  # a fork flag does not make it one
    assert texts(answer.json()) == ["research the logs"]


async def test_a_rolled_back_spawn_is_forgotten_and_an_ended_one_is_recorded(rpc: Any) -> None:
    await rpc.client.post("/v1/subagents/prepare", json=spawn())
    rolled = await rpc.client.post(
        "/v1/subagents/rollback", json={"childSessionKey": CHILD_KEY, "childSessionId": CHILD}
    )
    assert rolled.json() == {"ok": True, "childSession": CHILD}
    assert await lineage(rpc) is None
    unknown = await rpc.client.post(
        "/v1/subagents/ended", json={"childSessionKey": CHILD_KEY, "childSessionId": CHILD, "reason": "completed"}
    )
    assert unknown.json() == {"ok": True, "childSession": None}

    # prepared as the host prepares an isolated spawn: before the child has a sessionId
    await rpc.client.post("/v1/subagents/prepare", json=spawn("isolated", childSessionId=None))
    assert (await lineage(rpc)).child == ""
    ended = await rpc.client.post(
        "/v1/subagents/ended", json={"childSessionKey": CHILD_KEY, "childSessionId": CHILD, "reason": "swept"}
    )
    assert ended.json() == {"ok": True, "childSession": CHILD}
    record = await lineage(rpc)
    assert (record.parent, record.end_reason, record.parent_key) == (PARENT, "swept", PARENT_KEY)
    assert record.child == CHILD  # named by the end
    assert record.ended_at is not None and record.ended_at >= record.prepared_at
    ttl = rpc.redis.ttl(Keys(rpc.settings.key_prefix).session(LINEAGE_AT, rpc.settings.shards).lineage)
    assert 0 < ttl <= rpc.settings.session_state_ttl_s


async def test_ovstream_commits_shows_whose_subagent_a_session_is(rpc: Any, capsys: Any) -> None:
    await rpc.client.post("/v1/subagents/prepare", json=spawn())
    await rpc.assemble(child_call(oc_turns("q", "a"), forked=True))
    await rpc.client.post(
        "/v1/subagents/ended", json={"childSessionKey": CHILD_KEY, "childSessionId": CHILD, "reason": "completed"}
    )
    for key in (CHILD_KEY, None):  # as the README says to run it: by the child's session id alone too
        args = argparse.Namespace(session_id=CHILD, session_key=key, agent=None, user=None)
        assert cli_commits(rpc.settings, args) == 0
        said = capsys.readouterr().out
        assert f"subagent of {PARENT} ({PARENT_KEY}): fork, 2 message(s) copied" in said, (key, said)
        assert ", ended completed at " in said, said


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/subagents/prepare", spawn("borrowed"), "contextMode"),
        ("/v1/subagents/prepare", {"childSessionKey": CHILD_KEY}, "parentSessionKey"),
        ("/v1/subagents/ended", {"childSessionKey": CHILD_KEY, "reason": "bored"}, "reason"),
        ("/v1/subagents/rollback", {}, "childSessionKey"),
        (
            "/v1/assemble",
            {"sessionId": CHILD, "messageCount": 3, "recentTurns": [], "prompt": "", "forked": True},
            "forked",
        ),
    ],
)
async def test_bad_subagent_calls_are_refused_with_the_field(
    rpc: Any, path: str, body: dict[str, Any], field: str
) -> None:
    answer = await rpc.client.post(path, json=body)
    assert answer.status_code in (400, 422), answer.text
    assert field in answer.text
