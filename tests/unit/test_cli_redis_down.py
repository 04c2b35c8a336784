"""Every operator command with Redis away: one line naming the problem, exit 1, no traceback."""

from __future__ import annotations

import pytest

from workers.cli import main

DEAD = "redis://127.0.0.1:1/0"
"""Nothing listens on port 1: refused at once."""


@pytest.mark.parametrize(
    "argv",
    [
        ["commits", "some-session"],
        ["dlq", "list"],
        ["dlq", "replay", "--all"],
        ["dlq", "replay", "1-1"],
        ["dlq", "drop", "1-1"],
        ["reshard", "--shards", "8"],
        ["status"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_an_operator_command_with_redis_away_says_so_in_one_line(monkeypatch, capsys, argv: list[str]) -> None:
    monkeypatch.setenv("OVSTREAM_REDIS_URL", DEAD)
    code = main(argv)
    out, err = capsys.readouterr()
    said = [line for line in (out + err).splitlines() if line.strip()]
    assert code == 1, (code, said)
    assert len(said) == 1 and "Redis unreachable at redis://127.0.0.1:1/0" in said[0], said
    assert "Traceback" not in out + err
