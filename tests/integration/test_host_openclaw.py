"""ovstream inside the real OpenClaw host (openclaw@2026.9.6 on Node 24).

The gateway runs with the plugin installed by the README's commands; turns are
driven with ``openclaw agent`` and ``openclaw sessions compact``; every
assertion is on what the scripted model received (its recorded request
bodies) or on what ovstream recorded, against the real openviking-server.

The tests share one stack and run in file order: a later test builds on the
memories and archives of an earlier one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.ids import ov_session_id
from core.session import SessionAddress
from tests.helpers.e2e import unique, wait_for, workdir_for
from tests.helpers.host import HostStack, conversation_text, require_host, system_text
from tests.helpers.host_chat_model import content_text
from workers.commits.records import CommitRecords
from workers.store.keys import Keys, session_keys
from workers.store.lineage import Lineage, lineage_of

pytestmark = pytest.mark.host

require_host()

RECALL_MARK = "<relevant-memories>"
# A subject no other real-OV test uses: the dev-mode user's memories are shared by the session.
PREFERENCE = "I prefer fountain pens with sepia ink for every handwritten letter."


@pytest.fixture(scope="module")
def host(ov_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostStack]:
    workdir = workdir_for(tmp_path_factory.getbasetemp(), "host-openclaw")
    stack = HostStack(workdir, ov_server.url)
    try:
        stack.start()
        yield stack
    finally:
        stack.close()


def user_texts(request: dict[str, Any]) -> list[str]:
    return [content_text(m.get("content")) for m in request["messages"] if m.get("role") == "user"]


def count_in_user_messages(request: dict[str, Any], token: str) -> int:
    return sum(text.count(token) for text in user_texts(request))


def session_id_of(answer: dict[str, Any]) -> str:
    # Through the gateway the run is under "result"; a --local run prints it bare.
    return answer.get("result", answer)["meta"]["agentMeta"]["sessionId"]


def test_install_as_the_readme_says_registers_engine_and_tools(host: HostStack) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "plugins install -l ./ --force --accept-capabilities" in readme  # the command this stack ran
    assert "Linked plugin path" in host.install_output
    assert "differs from npm package name" not in host.install_output  # manifest id == package name
    gateway_log = host.log("gateway")
    assert 'registered context engine "ovstream" and 8 tools' in gateway_log
    # the host registers the plugin twice at start: the collision is said once
    assert gateway_log.count("memory_search is also registered by memory-core") == 1, gateway_log[-3000:]
    inspect = host.openclaw("plugins", "inspect", "ovstream", "--runtime", "--json").stdout
    assert "ovstream" in inspect and "memory_recall" in inspect


def test_tools_behind_tool_search_store_a_memory(host: HostStack) -> None:
    key = f"agent:main:{unique('pref')}"
    requests = host.turn(key, f'{PREFERENCE} [[tool:memory_store {{"text": "{PREFERENCE}"}}]]')
    assert len(requests) >= 2
    tool_results = [content_text(m.get("content")) for m in requests[-1]["messages"] if m.get("role") == "tool"]
    assert tool_results and "memory_store failed" not in tool_results[-1], tool_results
    # The memory is findable through the service before the next conversation asks for it.
    wait_for(
        lambda: (
            "sepia"
            in host.service.http.post(
                "/v1/tools/memory_recall", json={"params": {"query": "which pens do I prefer"}}
            ).text
        ),
        "the stored preference is recalled by memory_recall",
        timeout_s=180,
    )


def test_recall_reaches_every_model_request_of_a_turn_once(host: HostStack) -> None:
    key = f"agent:main:{unique('recall')}"
    misses = _metric(host, 'ovstream_recall_turn_cache_total{result="miss"}')
    requests = host.turn(
        key, 'Which pens do I prefer for handwritten letters? [[tool:ov_archive_search {"query": "pens"}]]'
    )
    assert len(requests) >= 2  # the tool loop: one model request per step
    for request in requests:
        system = system_text(request)
        assert system.count(RECALL_MARK) == 1, system[:500]
        assert "sepia" in system
        assert RECALL_MARK not in conversation_text(request)
    # One search for the whole turn: the other requests reused its block.
    assert _metric(host, 'ovstream_recall_turn_cache_total{result="miss"}') == misses + 1


def test_every_turn_exactly_once_while_capture_is_paused(host: HostStack) -> None:
    key = f"agent:main:{unique('lag')}"
    host.turn(key, "first words of this conversation")
    host.pause("capture")
    try:
        tokens = [f"token{n}x{os.getpid()}" for n in range(3)]
        for i, token in enumerate(tokens):
            requests = host.turn(key, f"remember {token}")
            for earlier in tokens[: i + 1]:
                for request in requests:
                    assert count_in_user_messages(request, earlier) == 1, (earlier, user_texts(request))
    finally:
        host.resume("capture")
    requests = host.turn(key, "and after capture caught up?")
    for token in tokens:
        assert all(count_in_user_messages(r, token) == 1 for r in requests), token


def test_compact_within_the_host_bound_then_the_archive_summary(host: HostStack) -> None:
    key = f"agent:main:{unique('compact')}"
    for n in range(3):
        host.turn(key, f"we deploy service number {n} on the blue cluster")
    answer = host.openclaw("sessions", "compact", key, "--json").stdout
    assert re.search(r'"ok"\s*:\s*true', answer), answer[-2000:]
    assert re.search(r'"compacted"\s*:\s*true', answer), answer[-2000:]
    requests = host.turn(key, "what did we deploy?")
    assert any("[Session History Summary]" in conversation_text(r) for r in requests)
    assert all("Session Context Guide" in system_text(r) for r in requests)


def test_a_reset_conversation_is_committed(host: HostStack) -> None:
    key = f"agent:main:{unique('reset')}"
    answer = host.agent(key, "a short conversation, far below the commit threshold")
    ov_session = session_id_of(answer)
    host.agent(key, "/reset")
    settings = host.service.settings

    def committed() -> bool:
        outcomes = CommitRecords(host.service.redis, settings).list(SessionAddress(ov_session, "main", None))
        return any(o.reason == "session_end" and o.status == "completed" for o in outcomes)

    wait_for(committed, "a session_end commit of the reset conversation", timeout_s=180)


def test_a_second_agent_keeps_its_own_context(host: HostStack) -> None:
    key = f"agent:helper:{unique('helper')}"
    token = f"helper{os.getpid()}"
    host.turn(key, f"the helper agent hears {token}")
    requests = host.turn(key, "what did the helper hear?")
    assert all(count_in_user_messages(r, token) == 1 for r in requests)


def test_a_sessions_second_turn_imports_nothing(host: HostStack) -> None:
    """The host bootstraps on a session's second turn; its transcript is the turn the plugin
    sent, so nothing is imported (it would be that turn again)."""
    key = f"agent:main:{unique('second')}"
    imports = host.log("gateway").count("earlier message(s) of session")
    host.turn(key, "the first turn of a new conversation")
    host.turn(key, "and its second turn")
    assert host.log("gateway").count("earlier message(s) of session") == imports, host.log("gateway")[-3000:]


# Last: a Redis restart kills the RQ worker's scheduler thread, so scheduled commit
# retries stall afterwards (issue 11); nothing after this test needs a commit.
def _child_requests(host: HostStack, since: int, marker: str) -> list[dict[str, Any]]:
    """The model requests of the subagent run whose task starts with ``marker`` (a task
    quoting another's, as one that spawns a grandchild does, is not that one)."""
    task = re.compile(r"\[Subagent Task\]\W*" + re.escape(marker))
    return [r for r in host.requests()[since:] if any(task.search(text) for text in user_texts(r))]


def _child_request(host: HostStack, since: int, marker: str) -> dict[str, Any]:
    """The first model request of that run."""

    def found() -> dict[str, Any] | None:
        return next(iter(_child_requests(host, since, marker)), None)

    return wait_for(found, f"the subagent run of {marker} asking the model", timeout_s=120)


def _session_of(request: dict[str, Any]) -> tuple[str, str]:
    """The run's sessionId and sessionKey, from the runtime line the host puts in its first
    user message (``session=<key> | sessionId=<id>``)."""
    found = re.search(r"session=(\S+) \| sessionId=([0-9a-f-]{36})", conversation_text(request) + system_text(request))
    assert found, conversation_text(request)[:2000]
    return found.group(2), found.group(1)


def _spawn_directive(task: str, context: str) -> str:
    """A sessions_spawn directive whose task may hold directives of its own: their brackets
    escaped in the JSON, so that the model asked by this turn sees only the outer one."""
    args = json.dumps({"task": task, "context": context}).replace("[", "\\u005b").replace("]", "\\u005d")
    return f"[[tool:sessions_spawn {args}]]"


def test_subagents_start_from_their_parent_and_leave_what_they_learned(host: HostStack) -> None:
    """sessions_spawn: a fork's model sees its parent's context as ovstream holds it (the archive
    summary), an isolated one none of it, and the grandchild it spawns is recorded as its child;
    each child's conversation is committed when its run ends, so the parent's next turn
    recalls what only a child heard."""
    key = f"agent:main:{unique('parent')}"
    for n in range(3):
        host.turn(key, f"leg {n} of our trip goes through Lisbon")
    answer = host.openclaw("sessions", "compact", key, "--json").stdout
    assert re.search(r'"compacted"\s*:\s*true', answer), answer[-2000:]
    tag = os.getpid()

    since = len(host.requests())
    host.agent(key, "Delegate the museums. " + _spawn_directive(f"FORK{tag}: list the museums on the way", "fork"))
    forked = _child_request(host, since, f"FORK{tag}")
    assert "[Session History Summary]" in conversation_text(forked)  # the parent's, from its snapshot
    assert system_text(forked).count(RECALL_MARK) <= 1
    # the host assembles the child again with what assemble answered: every model request of the
    # fork still carries the turn that spawned it (its parent's snapshot did not reflect it)
    fork_requests = _child_requests(host, since, f"FORK{tag}")
    assert all("Delegate the museums" in conversation_text(r) for r in fork_requests), [
        conversation_text(r)[-1500:] for r in fork_requests
    ]

    since = len(host.requests())
    fact = f"I prefer azulejo tiles numbered {tag} above every other souvenir."
    grandchild_task = _spawn_directive(f"GRAND{tag}: count the tiles", "isolated")
    host.agent(key, "Ask a helper. " + _spawn_directive(f"ISO{tag}: {fact} {grandchild_task}", "isolated"))
    isolated = _child_request(host, since, f"ISO{tag}")
    assert "[Session History Summary]" not in conversation_text(isolated)
    assert "Lisbon" not in conversation_text(isolated)  # nothing of the parent's transcript
    assert system_text(isolated).count(RECALL_MARK) <= 1
    child_session, child_key = _session_of(isolated)
    grandchild, grandchild_key = _session_of(_child_request(host, since, f"GRAND{tag}"))
    settings = host.service.settings
    keys = Keys(settings.key_prefix)

    def lineage(session_key: str) -> Lineage | None:  # kept under the child's session key
        where = SessionAddress(ov_session_id("", session_key), "main", None)
        return lineage_of(host.service.redis.hgetall(keys.session(where, settings.shards).lineage))

    record = wait_for(lambda: lineage(grandchild_key), "the grandchild's lineage recorded")
    assert record.parent_key == child_key and record.mode == "isolated"  # nested: the child's own child
    assert wait_for(lambda: lineage(child_key), "the child's lineage").parent_key == key
    records = CommitRecords(host.service.redis, settings)

    def committed(session: str) -> bool:
        # its end's own commit (one in flight when the end came is followed by it)
        outcomes = records.list(SessionAddress(session, "main", None))
        return any(o.reason == "session_end" and o.status == "completed" for o in outcomes)

    wait_for(lambda: committed(child_session), "the isolated child's conversation committed", timeout_s=180)
    wait_for(lambda: committed(grandchild), "the grandchild's conversation committed", timeout_s=180)

    def recalled() -> bool:
        requests = host.turn(key, "which souvenirs do I prefer?")
        return any(str(tag) in system_text(r) for r in requests)

    wait_for(recalled, "the parent recalling what only the child heard", timeout_s=180, interval_s=10)


def test_every_turn_exactly_once_while_redis_is_down(host: HostStack) -> None:
    key = f"agent:main:{unique('redis')}"
    host.turn(key, "a conversation that will outlive a Redis outage")
    host.redis.kill()
    try:
        token = f"outage{os.getpid()}"
        host.turn(key, f"said while Redis is down: {token}")
        requests = host.turn(key, "what did I say while Redis was down?")
        assert all(count_in_user_messages(r, token) == 1 for r in requests), [user_texts(r) for r in requests]
    finally:
        host.redis.restart()
        for name in ("capture", "worker"):
            if host.procs[name].poll() is not None:  # a worker that gave up on Redis is restarted
                host.start_service(name)
    requests = host.turn(key, "and once Redis is back?")
    assert all(count_in_user_messages(r, token) == 1 for r in requests)


def test_one_shot_runs_with_redis_down_keep_their_turn_and_get_the_last_run_once(host: HostStack) -> None:
    """Three one-shot runs (``openclaw agent --local``) of one conversation. The first, Redis
    up, is captured. The second, Redis down: its model request holds the first run's turn once
    (the host's import of it on the second turn adds nothing), and it keeps its own turn in the
    spool, saying the next run delivers it. The third, Redis back, delivers it and says so.
    (Each run starts the whole agent in the CLI: one conversation, not two, for both cases.)"""
    host.stop_gateway()  # one-shot runs own the state while they run
    key = f"agent:main:{unique('oneshot')}"
    first_token, second_token = f"upfirst{os.getpid()}", f"oneshot{os.getpid()}"
    message = f"Local run, Redis up: {first_token}"
    out = host.openclaw("agent", "--local", "--session-key", key, "--message", message, "--json")
    answer = json.loads(out.stdout[out.stdout.index("{") :])
    address = SessionAddress(ov_session_id(session_id_of(answer), key), "main", None)
    applied = session_keys(host.service.settings, address).applied
    wait_for(lambda: host.service.redis.hget(applied, "last_id"), "capture applying the first run", timeout_s=120)
    host.redis.kill()
    try:
        before = len(host.requests())
        second = host.openclaw(
            "agent", "--local", "--session-key", key, "--message", f"one-shot {second_token}", "--json"
        )
        requests = host.requests()[before:]
        assert requests and all(count_in_user_messages(r, first_token) == 1 for r in requests), [
            user_texts(r) for r in requests
        ]
        assert "next run delivers them" in second.stderr, second.stderr[-3000:]  # it says what it did
        assert list(host.spool.glob("*.json"))
    finally:
        host.redis.restart()
    before = len(host.requests())
    third = host.openclaw("agent", "--local", "--session-key", key, "--message", "what did I say last run?", "--json")
    assert re.search(r"delivering \d+ turn event\(s\) an earlier run left", third.stderr), third.stderr[-3000:]
    requests = host.requests()[before:]
    assert requests and all(count_in_user_messages(r, t) == 1 for r in requests for t in (first_token, second_token))
    assert not list(host.spool.glob("*.json"))


def _metric(host: HostStack, line_start: str) -> float:
    text = host.service.http.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
