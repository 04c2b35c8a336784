"""An erasure waits out a lock OV holds on what it removes (409 CONFLICT: an extraction writing
the user's memories, or OV's indexing), and stops with a message, not a traceback, when OV
keeps it longer (the e2e erase test met it against the real openviking-server)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from core.backoff import Backoff
from core.config import Settings
from core.ov.client import OVError
from workers.cli import erase as erase_cli
from workers.erasure import ov_side


def _locked(times: int) -> tuple[Any, list[int]]:
    calls: list[int] = []

    async def call() -> dict[str, int]:
        calls.append(1)
        if len(calls) <= times:
            raise OVError("CONFLICT", "lock acquire timed out after 0ms", status=409)
        return {"estimated_deleted_count": 3}

    return call, calls


async def test_a_lock_is_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ov_side, "LOCKED_BACKOFF", Backoff(0))
    call, calls = _locked(3)
    assert await ov_side._unlocked(call, "viking://~/memories") == {"estimated_deleted_count": 3}
    assert len(calls) == 4


async def test_a_lock_held_too_long_stops_it_and_other_errors_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ov_side, "LOCKED_BACKOFF", Backoff(0))
    call, calls = _locked(100)
    with pytest.raises(OVError, match="CONFLICT"):
        await ov_side._unlocked(call, "viking://~/memories")
    assert len(calls) == ov_side.LOCKED_TRIES + 1

    async def missing() -> None:
        raise OVError("NOT_FOUND", "gone", status=404)

    with pytest.raises(OVError, match="NOT_FOUND"):
        await ov_side._unlocked(missing, "viking://~/peers")


def test_the_command_says_to_run_it_again(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def busy(*_a: Any, **_k: Any) -> None:
        raise OVError("CONFLICT", "lock acquire timed out after 0ms", status=409)

    monkeypatch.setattr(erase_cli, "erase_with", busy)
    args = argparse.Namespace(user="default", account=None, agent=None, session=None, dry_run=False, json=False)
    assert erase_cli.cli_erase(Settings(redis_url="fakeredis://"), args) == 1
    said = capsys.readouterr().err
    assert "run the same command again: it resumes" in said and "CONFLICT" in said and "Traceback" not in said
