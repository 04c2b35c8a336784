"""Every operator command meets a fault in one line naming it, with no traceback: Redis away
(exit 1), a bad setting (exit 2, the variable named as it was set), OV away (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.cli import main
from workers.dev.local_redis import free_port

DEAD = "redis://127.0.0.1:1/0"
"""Nothing listens on port 1: refused at once."""

OPERATOR_COMMANDS = [
    ["commits", "some-session"],
    ["dlq", "list"],
    ["dlq", "replay", "--all"],
    ["dlq", "replay", "1-1"],
    ["dlq", "drop", "1-1"],
    ["reshard", "--shards", "8"],
    ["status"],
]


def _said(capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    out, err = capsys.readouterr()
    return [line for line in (out + err).splitlines() if line.strip()], out + err


@pytest.mark.parametrize("argv", OPERATOR_COMMANDS, ids=lambda argv: " ".join(argv))
def test_an_operator_command_with_redis_away_says_so_in_one_line(monkeypatch, capsys, argv: list[str]) -> None:
    monkeypatch.setenv("OVSTREAM_REDIS_URL", DEAD)
    code = main(argv)
    said, everything = _said(capsys)
    assert code == 1, (code, said)
    assert len(said) == 1 and "Redis unreachable at redis://127.0.0.1:1/0" in said[0], said
    assert "Traceback" not in everything


@pytest.mark.parametrize(
    "argv", [*OPERATOR_COMMANDS, ["health"], ["capture"], ["worker"], ["rpc"], ["up"]], ids=" ".join
)
@pytest.mark.parametrize(
    ("variable", "value"),
    [("OVSTREAM_SHARDS", "abc"), ("OVSTREAM_REDIS_URL", "http://x"), ("OVSTREAM_USER_API_KEYS", "notjson")],
)
def test_a_command_with_a_bad_setting_names_the_variable_in_one_line(
    monkeypatch, capsys, argv: list[str], variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    code = main(argv)
    said, everything = _said(capsys)
    assert code == 2, (code, said)
    assert len(said) == 1 and said[0].startswith(f"ovstream: invalid configuration: {variable}: "), said
    assert "Traceback" not in everything


def test_ov_account_with_ov_away_says_so_in_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    root = tmp_path / "root-key"
    root.write_text("k\n")
    monkeypatch.setenv("OVSTREAM_BASE_URL", f"http://127.0.0.1:{free_port()}")
    code = main(["ov-account", "--root-key-file", str(root), "--write-key", str(tmp_path / "key"), "--wait", "0"])
    said, everything = _said(capsys)
    assert code == 1 and len(said) == 1 and "did not answer within 0s" in said[0], said
    assert "Traceback" not in everything and not (tmp_path / "key").exists()


def test_ov_account_without_its_root_key_says_so_in_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    code = main(["ov-account", "--root-key-file", str(tmp_path / "none"), "--write-key", str(tmp_path / "key")])
    said, _ = _said(capsys)
    assert code == 2 and len(said) == 1 and "cannot read --root-key-file" in said[0], said
