"""`openclaw ovstream import` against the real OpenClaw 2026.9.6 host and the real
openviking-server: conversations the gateway stored before ovstream was installed (two
agents, a deleted session) reach OV once and in order, one past the commit threshold is
committed (phase 2 on the real OV); a second run and a run killed half way add nothing twice
and leave nothing out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from core.events import CommitOutcome, TurnEvent, encode
from core.ids import ov_session_id
from core.session import SessionAddress
from tests.helpers.e2e import OVSession, unique, wait_for, workdir_for
from tests.helpers.host import OPENCLAW, HostStack, require_host
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.store.streams import stream_of_event

pytestmark = pytest.mark.host

require_host()


@pytest.fixture(scope="module")
def history(ov_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostStack]:
    """A gateway that ran before ovstream: its conversations, then the plugin installed."""
    workdir = workdir_for(tmp_path_factory.getbasetemp(), "host-import")
    stack = HostStack(workdir, ov_server.url)
    try:
        stack.start(with_plugin=False)
        yield stack
    finally:
        stack.close()


def session_ids(host: HostStack) -> dict[str, str]:
    """Session key -> session id of every stored session, as the host lists them."""
    out = host.openclaw("sessions", "--all-agents", "--json", "--limit", "all").stdout
    listed = json.loads(out[out.index("{") :])
    return {row["key"]: row["sessionId"] for row in listed["sessions"] if row.get("sessionId")}


def ov_texts(ov: OVSession, ov_sid: str, role: str | None = None) -> list[str]:
    """The text of each message OV holds of the session (of ``role``), in order."""
    messages = ov.context(ov_sid).get("messages", [])
    return [
        "\n".join(str(p.get("text", "")) for p in m.get("parts", []))
        for m in messages
        if role is None or m.get("role") == role
    ]


def run_import(host: HostStack, *args: str) -> dict[str, Any]:
    done = host.openclaw("ovstream", "import", "--json", *args)
    said = done.stdout + done.stderr
    # the plugin's own command says what it did, not the gateway's registration and notes
    assert "registered context engine" not in said and "is also registered by" not in said, said[-3000:]
    return json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))


class Phases:
    """Seconds since the test began at each step, on stderr: a timeout's report says where the
    time went (pytest shows the captured output of a failed test)."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, step: str) -> None:
        print(f"[import] {time.monotonic() - self.started:6.1f} s  {step}", file=sys.stderr, flush=True)


# 14 turns through the gateway's HTTP endpoint, some 10 openclaw CLI runs (a Node process each,
# ~3-5 s of CPU) and the real OV's phase 2: 155 s alone on a quiet 2-core machine (185 s when the
# history's turns were CLI runs too), 510-611 s in a loaded `./test` beside the other lanes (CI
# timed out at the default 600 s). Every step waits on a condition; only the bound is longer.
@pytest.mark.timeout(1200)
def test_history_from_before_the_plugin_is_imported_once_and_in_order(history: HostStack, ov_server: Any) -> None:
    phase = Phases()
    tag = os.getpid()
    conversations = {
        f"agent:main:{unique('old')}": [f"main fact {n} {tag}" for n in range(3)],
        f"agent:helper:{unique('old')}": [f"helper fact {n} {tag}" for n in range(2)],
    }
    for key, lines in conversations.items():
        for line in lines:
            history.chat(key, line)
    # past the commit threshold (tests.helpers.e2e.THRESHOLD, 300 tokens): committed once imported
    long_key = f"agent:main:{unique('long')}"
    for n in range(2):  # two turns: the threshold commit keeps the last two messages (KEEP_RECENT)
        history.chat(long_key, f"I prefer sailing boats with red sails {tag} ({n}). " + "We sailed on. " * 60)
    many = [f"agent:main:many-{n}-{tag}" for n in range(6)]
    for n, key in enumerate(many):
        history.chat(key, f"conversation {n} of a long history {tag}")
    deleted = f"agent:main:{unique('deleted')}"
    history.chat(deleted, f"a conversation deleted before the import {tag}")
    history.openclaw("sessions", "delete", deleted, "--yes")
    phase("history written through the gateway")
    ids = session_ids(history)
    assert deleted not in ids
    ov_sids = {key: ov_session_id(ids[key], key) for key in [*conversations, *many, long_key]}

    history.stop_gateway()
    history.install_plugin()
    ov = OVSession(ov_server.url)
    try:
        # A turn an earlier process spooled and did not deliver: the command delivers it and
        # still exits (the host registers the plugin twice, each a publisher of that spool).
        spooled = TurnEvent(
            event_id=unique("spooled"),
            session_id=unique("spooled-session"),
            session_key=f"agent:main:spooled-{tag}",
            agent_id="main",
            messages=[{"role": "user", "content": f"a turn left in the spool {tag}"}],
            published_at=time.time(),
        )
        history.spool.mkdir(parents=True, exist_ok=True)
        record = {"key": stream_of_event(history.service.settings, spooled), "payload": encode(spooled).decode()}
        (history.spool / "000000000000001-1-1.json").write_text(json.dumps(record))
        phase("plugin installed")
        dry = run_import(history, "--dry-run")
        assert dry["outcomes"]["would import"] >= len(conversations) + len(many), dry
        assert dry["undelivered"] == 0 and not list(history.spool.iterdir()), dry
        # what the dry run says of them: none known to capture yet, every one new
        assert dry["inOv"]["already"] == 0 and dry["inOv"]["pending"] == dry["outcomes"]["would import"], dry
        assert all(ov.state(ov_sid) is None for ov_sid in ov_sids.values())  # the dry run sent nothing

        # killed part way (one message a second), then run again: each once, none left out
        proc = subprocess.Popen(
            [str(OPENCLAW), "ovstream", "import", "--rate", "1", "--match", f"^agent:main:many-.*-{tag}$"],
            cwd=history.workdir,
            env=history.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_for(lambda: any(ov.state(ov_sids[k]) for k in many), "the first sessions imported", timeout_s=120)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert not all(ov.state(ov_sids[k]) for k in many), "killed too late to show anything"
        phase("an import killed part way")
        rerun = run_import(history, "--match", f"^agent:main:many-.*-{tag}$")
        assert rerun["outcomes"]["imported"] == len(many), rerun
        # what it did, as capture applied it: the killed run's sessions (what it had sent before the
        # kill goes on being applied) already there, any it had not sent new to OV
        said = rerun["inOv"]
        assert said["pending"] == 0 and said["written"] + said["partly"] + said["already"] == len(many), rerun
        assert said["already"] >= 1, rerun
        history.service.wait_drained()
        for n, key in enumerate(many):
            texts = ov_texts(ov, ov_sids[key])
            assert sum(f"conversation {n} of a long history {tag}" in t for t in texts) == 1, (key, texts)

        phase("the killed import run again")
        first = run_import(history)
        assert first["outcomes"]["imported"] == dry["outcomes"]["would import"], first
        assert first["undelivered"] == 0
        said = first["inOv"]  # the `many` imported before: already there; the others new to OV
        assert said["pending"] == 0 and said["already"] >= len(many), first
        assert said["written"] >= len(conversations) + 1 and said["writtenMessages"] > 0, first
        assert said["written"] + said["partly"] + said["already"] == first["outcomes"]["imported"], first
        history.service.wait_drained()
        held: dict[str, list[str]] = {}
        for key, lines in conversations.items():
            texts = wait_for(lambda k=key: ov_texts(ov, ov_sids[k]) or None, f"OV holding {key}")
            users = [t for t in ov_texts(ov, ov_sids[key], "user") if any(line in t for line in lines)]
            # each user line once, in the order it was said
            assert [next(line for line in lines if line in t) for t in users] == lines, texts
            held[key] = texts
        long_address = SessionAddress(ov_sids[long_key], "main", None)
        records = CommitRecords(history.service.redis, history.service.settings)

        def committed() -> list[CommitOutcome] | None:
            outcomes = [o for o in records.list(long_address) if o.status in FINAL_STATUSES]
            return outcomes or None

        phase("the first full import held by OV")
        outcomes = wait_for(committed, "the long imported conversation committed", timeout_s=180)
        assert [o.status for o in outcomes] == ["completed"], outcomes
        everything = [t for key in ov_sids for t in ov_texts(ov, ov_sids[key])]
        assert not any(f"deleted before the import {tag}" in t for t in everything)
        spooled_texts = ov_texts(ov, ov_session_id(spooled.session_id, spooled.session_key))
        assert sum(f"a turn left in the spool {tag}" in t for t in spooled_texts) == 1, spooled_texts

        phase("the long conversation committed")
        again = run_import(history)
        assert again["outcomes"]["imported"] == first["outcomes"]["imported"]  # sent again ...
        # ... and said to be already there, every one (it said "imported" of them all before)
        assert again["inOv"]["already"] == again["outcomes"]["imported"] and again["inOv"]["written"] == 0, again
        history.service.wait_drained()
        for key in conversations:
            assert ov_texts(ov, ov_sids[key]) == held[key]  # ... and written by nobody
    finally:
        ov.close()
