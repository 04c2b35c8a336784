"""workers.logs: JSON lines carry the process and the shard/session/commit they were logged for."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from workers import logs

log = logging.getLogger("ovstream.test")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def _lines(err: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_json_lines_name_the_process_and_the_context(capsys, restore_logging) -> None:
    logs.configure("capture", json_lines=True)
    log.info("outside")
    with logs.fields(shard=3, session="s1"):
        log.warning("round %d", 7)
        with logs.fields(commit_id="c9"):
            log.info("recorded", extra={"outcome": "completed"})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    outside, inside, recorded, failed = _lines(capsys.readouterr().err)
    assert outside["process"] == "capture" and outside["msg"] == "outside" and "shard" not in outside
    assert (inside["level"], inside["msg"], inside["shard"], inside["session"]) == ("WARNING", "round 7", 3, "s1")
    assert (recorded["commit_id"], recorded["outcome"], recorded["shard"]) == ("c9", "completed", 3)
    assert "ValueError: boom" in failed["exc"] and "shard" not in failed


async def test_each_task_keeps_its_own_shard(capsys, restore_logging) -> None:
    logs.configure("capture", json_lines=True)

    async def consumer(shard: int) -> None:
        logs.SHARD.set(shard)
        await asyncio.sleep(0)
        log.info("tick")

    await asyncio.gather(*(asyncio.create_task(consumer(s)) for s in (0, 1, 2)))
    assert sorted(line["shard"] for line in _lines(capsys.readouterr().err)) == [0, 1, 2]


def test_text_stays_the_default(capsys, restore_logging) -> None:
    logs.configure("worker")
    log.info("plain line")
    assert capsys.readouterr().err.rstrip().endswith("INFO ovstream.test: plain line")


def test_records_go_to_the_stderr_of_the_moment(monkeypatch, restore_logging) -> None:
    """A process configured while stderr was one stream logs to the next one once it is replaced
    (pytest replaces and closes it per test): no "--- Logging error ---" for a closed file."""
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("capture")
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    log.warning("after the swap")
    assert second.getvalue().rstrip().endswith("WARNING ovstream.test: after the swap")
    assert "Logging error" not in second.getvalue()
