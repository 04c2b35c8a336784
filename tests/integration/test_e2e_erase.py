"""End to end on the real openviking-server 0.5.2 in API-key mode: ``ovstream erase --user alice``,
SIGKILLed mid-way and run again, leaves no OV session or file of hers (memories included), no
Redis key naming her sessions and no value holding her words, and all of bob's; her turns
published afterwards are dropped unapplied."""

from __future__ import annotations

import os
import signal
import subprocess

from core.erasure import ErasureScope, scope_digest
from core.messages.tokens import estimate_message_tokens
from tests.helpers.e2e import Conversation, OVSession, Service, ovstream_command, wait_for
from tests.helpers.redis_dump import key_names, values
from workers.store.connection import text
from workers.store.keys import Keys

pytest_plugins = ("tests.helpers.e2e_fixtures",)

ALICE = "alice-erase-words: I prefer oolong tea with lemon in the evening, and the flat is on Rue Lepic."
BOB = "bob-keep-words: I prefer black coffee without sugar in the morning, before the first meeting."


def _compact(service: Service, conv: Conversation, key: str) -> None:
    body = {**conv.ref, "tokenBudget": 128_000, "currentTokenCount": estimate_message_tokens(conv.messages)}
    answer = service.post("/v1/compact", body, api_key=key)
    assert answer["ok"] and answer["compacted"], answer


def _grep(ov: OVSession, pattern: str) -> int:
    r = ov.http.post("/api/v1/search/grep", json={"uri": "viking://user", "pattern": pattern})
    assert r.status_code == 200, r.text
    return int(r.json()["result"]["count"])


def _sessions(ov: OVSession) -> list[str]:
    r = ov.http.get("/api/v1/sessions")
    assert r.status_code == 200, r.text
    return [s["session_id"] for s in r.json()["result"]]


def _erase(service: Service) -> subprocess.Popen[bytes]:
    env = {**service.env, "OVSTREAM_ERASE_SETTLE_S": "2"}
    return subprocess.Popen(
        [*ovstream_command(), "erase", "--user", "alice"],
        cwd=service.workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_erase_killed_mid_way_and_run_again_leaves_nothing_of_alice_and_all_of_bob(
    keyed_service: Service, ov_keyed_server, tenants
) -> None:
    service = keyed_service
    alice = Conversation("erase-alice", user="alice")
    bob = Conversation("erase-bob", user="bob")
    as_alice, as_bob = (
        OVSession(ov_keyed_server.url, tenants.keys["alice"]),
        OVSession(ov_keyed_server.url, tenants.keys["bob"]),
    )
    try:
        for conv, said, ov in ((alice, ALICE, as_alice), (bob, BOB, as_bob)):
            service.publish(conv.turn(said, "Noted, I will remember that."))
            ov.wait_total_messages(conv.ov_session_id, len(conv.messages))
            _compact(service, conv, tenants.keys[conv.user or ""])
        assert _grep(as_alice, "oolong") >= 1 and _grep(as_bob, "black coffee") >= 1

        record = Keys(service.settings.key_prefix).erasure(
            scope_digest(service.settings.key_prefix, ErasureScope("alice"))
        )
        first = _erase(service)
        passed = wait_for(
            lambda: (
                ("ov done" if service.redis.hexists(record, "removed:ov_sessions") else None)
                or ("exited" if first.poll() is not None else None)
            ),
            "the first pass through OV",
            timeout_s=120,
        )
        assert passed == "ov done", (first.stdout.read() if first.stdout else b"").decode(errors="replace")
        os.killpg(first.pid, signal.SIGKILL)  # mid-way: OV's side removed, the second pass not run
        first.wait()
        assert text(service.redis.hget(record, "state") or b"") == "running"
        second = _erase(service)
        out, _ = second.communicate(timeout=300)
        assert second.returncode == 0, out.decode(errors="replace")
        assert b"erase user alice: removed" in out and b"2 run(s)" in out, out

        assert (
            _sessions(as_alice) == [] and _grep(as_alice, "oolong") == 0 and _grep(as_alice, "alice-erase-words") == 0
        )
        assert bob.ov_session_id in _sessions(as_bob) and _grep(as_bob, "black coffee") >= 1
        names = key_names(service.redis)
        assert not [n for n in names if alice.ov_session_id in n]
        assert [n for n in names if bob.ov_session_id in n]
        kept = values(service.redis)
        assert b"alice-erase-words" not in kept and b"bob-keep-words" in kept

        # her turn published after the erasure: dropped unapplied, nothing of it in OV or Redis
        service.publish(alice.turn("alice-erase-words again: one more thing to remember.", "Noted."))
        service.publish(bob.turn("bob-keep-words again: one more thing.", "Noted."))
        as_bob.wait_total_messages(bob.ov_session_id, len(bob.messages))  # bob's turn applied
        service.wait_drained()  # hers read and acked too
        assert _sessions(as_alice) == []
        assert b"alice-erase-words" not in values(service.redis)

        # one agent of bob's: its session goes, his main agent's stays
        coder = Conversation("erase-bob-coder", user="bob")
        coder.session_key = f"agent:coder:{coder.session_id}"
        service.publish(coder.turn("bob-coder-words: the build uses make and ninja.", "Noted."))
        as_bob.wait_total_messages(coder.ov_session_id, len(coder.messages))
        env = {**service.env, "OVSTREAM_ERASE_SETTLE_S": "1"}
        command = [*ovstream_command(), "erase", "--user", "bob", "--agent", "coder"]
        done = subprocess.run(command, cwd=service.workdir, env=env, capture_output=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
        assert coder.ov_session_id not in _sessions(as_bob) and bob.ov_session_id in _sessions(as_bob)
        assert _grep(as_bob, "bob-coder-words") == 0 and _grep(as_bob, "black coffee") >= 1
    finally:
        as_alice.close()
        as_bob.close()
