"""``ovstream demo`` against the fakes (embedded fakeredis + in-memory FakeOV), end to end.

The demo runs as a subprocess, as ``./run`` runs it, so its process-wide state
(the embedded Redis, the jobs' OV transport) cannot leak into other tests.
The timeout only bounds a hang; nothing here asserts on timing.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from workers.dev.demo_replay import DemoFailure, load_sample
from workers.dev.demo_report import (
    Progress,
    format_assemble,
    memory_count,
    message_summary,
    one_line,
    readable_summary,
    recall_block,
)
from workers.dev.demo_services import provide_ov, provide_redis
from workers.dev.local_redis import free_port, redis_answers

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 240


def run_demo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", "demo", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


def section(stdout: str, title_start: str) -> str:
    """The lines of one ``== ... ==`` section of the demo's output."""
    out: list[str] = []
    inside = False
    for line in stdout.splitlines():
        if line.startswith("== "):
            inside = line.startswith(f"== {title_start}")
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


@pytest.fixture(scope="module")
def fake_demo() -> subprocess.CompletedProcess[str]:
    return run_demo("--fake-ov", "--embedded")


def test_fake_demo_succeeds_and_says_what_it_used(fake_demo: subprocess.CompletedProcess[str]) -> None:
    assert fake_demo.returncode == 0, fake_demo.stderr[-3000:]
    out = fake_demo.stdout
    assert "Redis: embedded fakeredis" in out
    assert "OV: in-memory FakeOV" in out
    for i in range(1, 5):
        assert f"turn {i}/4: afterTurn published" in out
        assert f"turn {i}/4: captured" in out
    assert "enqueued (threshold" in out
    assert "ovstream demo: OK" in out


def test_fake_demo_main_assemble_has_the_summary_of_the_archived_turns(
    fake_demo: subprocess.CompletedProcess[str],
) -> None:
    main = section(fake_demo.stdout, "main assemble of session")
    assert main, fake_demo.stdout
    assert "## Session Context Guide" in main  # the systemPromptAddition
    summary_line = next(line for line in main.splitlines() if line.lstrip().startswith("1. user"))
    assert "[Session History Summary]" in summary_line
    # the summary carries the archived first turn, which is no longer a message of its own
    assert "family-run ryokan" in main
    assert "estimatedTokens:" in main


def test_fake_demo_records_a_completed_commit(fake_demo: subprocess.CompletedProcess[str]) -> None:
    table = section(fake_demo.stdout, "recorded commit outcomes")
    rows = [line for line in table.splitlines() if line.startswith("commit_")]
    assert len(rows) == 1, table
    assert " threshold " in rows[0] and " completed " in rows[0] and "archive_001" in rows[0]


def test_demo_fails_clearly_when_no_commit_is_reached() -> None:
    result = run_demo("--fake-ov", "--embedded", "--commit-threshold", "1000000")
    assert result.returncode == 1
    assert "FAILED: no commit was enqueued" in result.stderr


def test_demo_fails_clearly_on_a_missing_sample(tmp_path: Path) -> None:
    result = run_demo("--fake-ov", "--embedded", "--sample", str(tmp_path / "nope.json"))
    assert result.returncode == 1
    assert "cannot read the sample conversation" in result.stderr


def test_serve_keeps_serving_until_sigterm_then_stops_cleanly() -> None:
    import signal

    import httpx

    env = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "demo", "--fake-ov", "--embedded", "--serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:  # ends at EOF if the demo exits instead of serving
            lines.append(line)
            if "Ctrl-C stops" in line:
                break
        serving = next((line for line in lines if line.startswith("serving: RPC ")), None)
        assert serving is not None, "".join(lines)
        url = serving.split()[2]
        assert httpx.get(f"{url}/healthz", timeout=10, trust_env=False).json()["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert "stopping" in rest and "ovstream demo: OK" in rest


# --- the pieces ------------------------------------------------------------------------------


def test_load_sample_reads_the_shipped_conversation() -> None:
    sample = load_sample(ROOT / "config" / "sample_conversation.json")
    assert len(sample.turns) == 4 and sample.recall_question.endswith("?")
    assert sample.session_key.startswith("agent:demo:")


def test_load_sample_rejects_a_malformed_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"turns": [{"user": "hi"}]}))
    with pytest.raises(DemoFailure, match="cannot read the sample"):
        load_sample(path)


def test_provide_redis_prefers_embedded_when_asked_and_falls_back_when_nothing_answers() -> None:
    said: list[str] = []
    with ExitStack() as stack:
        assert provide_redis("redis://127.0.0.1:1/0", stack, said.append, embedded=True) == ("fakeredis://", "embedded")
    assert "embedded fakeredis" in said[0]
    assert not redis_answers(f"redis://127.0.0.1:{free_port()}/0", 0.2)
    assert not redis_answers("fakeredis://")


def test_provide_redis_starts_a_redis_server_and_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed")
    said: list[str] = []
    with ExitStack() as stack:
        url, kind = provide_redis(f"redis://127.0.0.1:{free_port()}/0", stack, said.append)
        assert kind == "started"
        assert redis_answers(url)
    assert not redis_answers(url, 0.2)
    assert "started redis-server" in said[0]


def test_provide_ov_with_fake_asks_nothing() -> None:
    said: list[str] = []
    with ExitStack() as stack:
        assert provide_ov("http://127.0.0.1:1", stack, said.append, fake=True)[1] == "fake"
    assert said == ["OV: in-memory FakeOV (--fake-ov)"]


def test_message_summary_is_one_line_with_role_and_head() -> None:
    text = "word " * 60
    line = message_summary({"role": "user", "content": f"line one\n{text}"})
    assert line.startswith("user ") and "\n" not in line
    assert len(line) <= 11 + 100 and line.endswith("…")
    assert message_summary({"role": "assistant", "content": [{"type": "toolCall", "name": "read"}]}).endswith("(read)")
    assert one_line("a \n  b") == "a b"


def test_recall_block_is_found_in_the_latest_user_message() -> None:
    block = (
        "<relevant-memories>\nSource: x\n- [preferences]\n  <uri>viking://a</uri>\n  - A\n"
        "- [preferences]\n  <uri>viking://b</uri>\n  - B\n</relevant-memories>"
    )
    messages = [{"role": "user", "content": "old"}, {"role": "user", "content": f"{block}\n\nquestion?"}]
    assert recall_block(messages) == block
    assert memory_count(block) == 2
    assert recall_block([{"role": "user", "content": "no block"}]) is None


def test_format_assemble_shows_summary_guide_and_messages() -> None:
    body = {
        "estimatedTokens": 42,
        "systemPromptAddition": "## Guide",
        "messages": [
            {"role": "user", "content": "[Session History Summary]\n# Working Memory\nfacts"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ],
    }
    text = format_assemble("t", body)
    assert "estimatedTokens: 42" in text and "| ## Guide" in text
    assert "| # Working Memory" in text
    assert "   1. user       [Session History Summary] # Working Memory facts" in text
    assert "   2. assistant  ok" in text


def test_the_summary_is_shown_without_its_header_or_the_templates_section_descriptions() -> None:
    archived = "\n".join(
        [
            "[Session History Summary]",
            "# Working Memory",
            "## Session Title",
            "_A short and distinctive 5-10 word descriptive title for the session. Info-dense, no filler._",
            "Kyoto trip in spring",
            "## Key Facts & Decisions",
            "_Stable facts about the user's world._",
            "- user: _emphasis_ stays in a fact",
        ]
    )
    shown = readable_summary(archived)
    assert shown.splitlines() == [
        "# Working Memory",
        "## Session Title",
        "Kyoto trip in spring",
        "## Key Facts & Decisions",
        "- user: _emphasis_ stays in a fact",
    ]
    assert "[Session History Summary]" not in shown
    # the message list says the same of it: "shown without the template's section descriptions"
    line = message_summary({"role": "user", "content": archived})
    assert line.startswith("user       [Session History Summary] # Working Memory ## Session Title Kyoto"), line
    assert "_A short and distinctive" not in line


@pytest.mark.parametrize("tty", [True, False])
def test_progress_is_one_line_on_a_terminal_and_a_line_per_change_elsewhere(tty: bool) -> None:
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    progress = Progress(stream)
    for second, status in enumerate(["pending", "running", "running", "running"]):
        progress.update(f"waiting on phase 2: commit c {status}, {second} s", f"commit c {status}")
    progress.end()
    out = stream.getvalue()
    if tty:
        assert out.count("\n") == 1 and out.count("\r") == 4 and out.endswith("running, 3 s\n")
    else:
        assert out.splitlines() == [
            "waiting on phase 2: commit c pending, 0 s",
            "waiting on phase 2: commit c running, 1 s",
        ]
