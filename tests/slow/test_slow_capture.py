"""Slow or overloaded is not broken: a backlog recovered through a slow OV by a starved process.

The situation after an OV or capture outage: the host's largest events waiting (2,000
afterTurn events of about 40 KiB, each a whole transcript, and 2,000 commitTurn events), and a
machine busy catching up. One ``ovstream capture`` process (3 s shard leases) recovers it
while OV answers every write after 1-2 s, while the process is frozen for 3-8 s at a time
(SIGSTOP: longer than its leases), or both; on one Redis and on the 3-master cluster.
Every message reaches OV once and in order, nothing is dead-lettered, and the streams are
trimmed after.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from core.events import TurnEvent
from core.session import shard_of
from tests.capture.test_capture_backlog import commit_turn  # commitTurn's event: its turn, its key
from tests.helpers.chaos import Deployment, Ledger
from tests.helpers.fake_ov_process import ov_answers, spawn_fake_ov
from tests.helpers.waiting import wait_until
from tests.slow.conftest import WRITE_LATENCY_MS, Starver
from workers.dev.local_redis import free_port
from workers.store.connection import connect
from workers.store.keys import Keys
from workers.store.streams import publish_turn

SESSIONS = 40
TURNS = 50
"""Per kind: 40 sessions x 50 turns = 2,000 afterTurn and 2,000 commitTurn events."""
AFTER_TURN_BYTES = 40 * 1024

SLOW_SETTINGS: dict[str, Any] = {
    "key_prefix": "slow",
    "shards": 4,
    "capture_lease_ms": 3000,
    "capture_block_ms": 200,
    "commit_token_threshold": 10**9,  # no commits: this tier is about capture
}


def after_turn(session: str, index: int) -> TurnEvent:
    """afterTurn's event: the whole transcript (about 40 KiB, however long), the new turn last.
    Each message starts with its identity (``<session>:q<i>``), as the ledger reads it."""
    pad = "x" * max(0, AFTER_TURN_BYTES // (2 * (index + 1)) - 24)
    messages: list[dict[str, Any]] = []
    for i in range(index + 1):
        messages.append({"role": "user", "content": f"{session}:q{i} {pad}"})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"{session}:a{i} {pad}"}]})
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session,
        messages=messages,
        pre_prompt_message_count=2 * index,
        published_at=time.time(),
    )


def expected(session: str) -> list[str]:
    return [f"{session}:{kind}{i}" for i in range(TURNS) for kind in ("q", "a")]


CASES = {
    "slow-ov": (True, False),
    "starved": (False, True),
    "slow-ov-and-starved": (True, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_large_backlog_is_recovered_whole_by_a_slow_starved_capture(
    store: dict[str, Any], tmp_path: Path, case: str
) -> None:
    slow_ov, starved = CASES[case]
    port = free_port()
    ov = spawn_fake_ov(port, tmp_path, *(["--route-latency-ms", WRITE_LATENCY_MS] if slow_ov else []))
    ov_url = f"http://127.0.0.1:{port}"
    deployment = Deployment({**SLOW_SETTINGS, **store, "base_url": ov_url}, tmp_path)
    sessions = [f"after{s}" for s in range(SESSIONS)] + [f"commit{s}" for s in range(SESSIONS)]
    ledger = Ledger(deployment.settings, ov_url, sessions)
    starver: Starver | None = None
    try:
        wait_until(lambda: ov_answers(ov_url), "the fake OV answering", timeout_s=30)
        client = connect(deployment.settings)
        marks: dict[int, str] = {}
        published = 0
        for i in range(TURNS):  # the backlog, published while capture is away
            for s in range(SESSIONS):
                for event in (after_turn(f"after{s}", i), commit_turn(f"commit{s}", i)):
                    marks[shard_of(event.session_id, deployment.settings.shards)] = publish_turn(
                        client, deployment.settings, event
                    )
                    published += 1
        assert published == 2 * SESSIONS * TURNS

        deployment.start("capture-a")
        if starved:
            starver = Starver(deployment.procs["capture-a"], stop_s=(3.0, 8.0), run_s=(0.5, 2.0)).start()
        wait_until(lambda: ledger.caught_up(marks), "capture caught up with the backlog", timeout_s=420)
        if starver is not None:
            starver.stop()
            assert starver.freezes >= 1  # it was starved while it worked
        assert deployment.exited() == {}, deployment.log("capture-a")

        for session in sessions:
            assert ledger.ov_ids(session) == expected(session), session  # once each, in order
        keys = Keys(deployment.settings.key_prefix)
        assert client.xlen(keys.dead_letters()) == 0, deployment.log("capture-a")
        log = (tmp_path / "capture-a.log").read_text(errors="replace")
        assert "dead-lettered" not in log

        def trimmed() -> bool:  # the idle consumer trims what it applied (approximately: whole nodes)
            keep = deployment.settings.overlay_stream_scan + 100
            return all(client.xlen(keys.stream(shard)) <= keep for shard in marks)

        wait_until(trimmed, "the streams trimmed of what capture applied", timeout_s=30)
        client.close()
    finally:
        if starver is not None:
            starver.stop()
        deployment.stop()
        ledger.close()
        ov.terminate()
        ov.wait(timeout=10)
