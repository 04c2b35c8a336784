"""Operator commands as an operator types them, against a real redis-server: each case answers
one line with a clear exit code, and a reader that stops early (``| head -1``) ends none of
them in a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from tests.helpers.e2e import ovstream_command, settings_env, unique
from workers.store.health import record_health


@pytest.fixture
def env(redis_url: str) -> dict[str, str]:
    return settings_env({"redis_url": redis_url, "key_prefix": unique("cli")})


def _run(env: dict[str, str], *argv: str) -> tuple[int, list[str], str]:
    done = subprocess.run([*ovstream_command(), *argv], env=env, capture_output=True, text=True, timeout=60)
    text = done.stdout + done.stderr
    return done.returncode, [line for line in text.splitlines() if line.strip()], text


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["dlq", "drop", "nonexistent-id"], 1, "no dead letter nonexistent-id"),
        (["dlq", "replay", "nonexistent"], 1, "no dead letter nonexistent"),
        (["dlq", "drop", "1-1"], 1, "no dead letter 1-1"),
        (["reshard", "--shards", "0"], 2, "shards must be a positive count"),
        (["commits", ""], 2, "needs a non-empty sessionId or sessionKey"),
        (["dlq", "replay", "--all"], 1, "no dead letters to replay"),
        (["reshard", "--shards", "8"], 0, "generation 1: 8 shards"),  # its INFO log line is not said beside it
        (["--version"], 0, "ovstream "),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_an_operator_command_answers_in_one_line(env: dict[str, str], argv: list[str], code: int, says: str) -> None:
    got, lines, text = _run(env, *argv)
    assert got == code and len(lines) == 1 and says in lines[0], text
    assert "Traceback" not in text


@pytest.mark.parametrize("argv", [["status"], ["dlq", "list"], ["status", "--json"], ["--help"]], ids=" ".join)
def test_a_reader_that_stops_early_ends_no_command_in_a_traceback(env: dict[str, str], argv: list[str]) -> None:
    # the reader is gone before the command writes a byte: every write meets a broken pipe
    proc: Any = subprocess.Popen([*ovstream_command(), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"BrokenPipe" not in err and b"Traceback" not in err, err.decode()


def test_version_is_the_packages(env: dict[str, str]) -> None:
    version = next(
        line.split('"')[1]
        for line in (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert _run(env, "--version")[1] == [f"ovstream {version}"]


def _demo(env: dict[str, str], *argv: str) -> tuple[int, str]:
    done = subprocess.run(
        [*ovstream_command(), "demo", "--fake-ov", *argv], env=env, capture_output=True, text=True, timeout=240
    )
    return done.returncode, done.stdout + done.stderr


def test_the_demo_leaves_no_key_in_a_redis_it_did_not_start(env: dict[str, str], redis_client: Any) -> None:
    before = set(redis_client.scan_iter(count=1000))
    code, text = _demo(env)
    assert code == 0, text
    assert "removed the demo's" in text and "--keep leaves them" in text
    assert set(redis_client.scan_iter(count=1000)) - before == set(), text  # nothing of its own left behind


def test_the_demo_kept_prints_a_commits_command_that_finds_them(env: dict[str, str], redis_client: Any) -> None:
    code, text = _demo(env, "--keep")
    assert code == 0, text
    line = next(line for line in text.splitlines() if "its commits: " in line)
    command = line.split("its commits: ", 1)[1].split()
    assignments = dict(word.split("=", 1) for word in command if "=" in word and not word.startswith("-"))
    program = next(word for word in command if word.endswith("ovstream"))
    argv = command[command.index(program) + 1 :]
    code, _, said = _run({**env, **assignments}, *argv)  # pasted as printed
    assert code == 0 and "completed" in said and "no commits recorded" not in said, said
    prefix = assignments["OVSTREAM_KEY_PREFIX"]
    assert any(redis_client.scan_iter(match=f"{prefix}:*", count=1000))


def test_status_explains_what_it_cannot_show(env: dict[str, str], redis_url: str) -> None:
    # A Redis restarted without persistence (or a new deployment): no record of the layout.
    code, lines, text = _run(env, "status")
    assert code == 0, text
    said = next(line for line in lines if line.startswith("releases running"))
    assert "Redis layout not recorded: the next ovstream process to start records it" in said, said
    assert "(Redis layout -)" not in text


def test_status_says_none_for_a_fact_with_no_value(env: dict[str, str], redis_client: Any) -> None:
    # A standalone RPC no plugin called lately beats with plugins="" (it said "plugins=").
    settings = Settings(redis_url=env["OVSTREAM_REDIS_URL"], key_prefix=env["OVSTREAM_KEY_PREFIX"])
    with redis_client.pipeline() as pipe:
        record_health(pipe, settings, "rpc", "rpc-standalone", plugins="")
        pipe.execute()
    code, lines, _ = _run(env, "status")
    said = next(line for line in lines if "rpc-standalone" in line)
    assert code == 0 and "plugins=none" in said and not said.rstrip().endswith("plugins="), said
