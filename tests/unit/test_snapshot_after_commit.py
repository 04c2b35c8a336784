"""The snapshot refresh after a commit (workers.commits.ov_steps.refresh_quietly): OV 0.5.2
under load once answered the read ``400 Expecting value`` while phase 2 wrote the session; a
second read is made before the snapshot is given up (dropped, with a WARNING)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

from core.config import Settings
from core.events import CommitRequest
from core.ov.envelope import OVError
from workers.commits import ov_steps

HICCUP = OVError("INVALID_ARGUMENT", "Expecting value: line 1 column 1 (char 0)", status=400)


class _Redis:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, key: str) -> int:
        self.deleted.append(key)
        return 1


@pytest.mark.parametrize(("failures", "dropped"), [(0, False), (1, False), (2, True)])
def test_one_failed_read_is_read_again_two_drop_the_snapshot(
    failures: int, dropped: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reads: list[int] = []

    def refresh(_redis: Any, _settings: Any, _address: Any, _read: Any) -> None:
        reads.append(1)
        if len(reads) <= failures:
            raise HICCUP

    monkeypatch.setattr(ov_steps, "refresh_snapshot_on_thread", refresh)
    monkeypatch.setattr(ov_steps, "SNAPSHOT_READ_AGAIN_S", 0.0)
    redis = _Redis()
    ctx = SimpleNamespace(settings=Settings(), store=redis)
    request = CommitRequest(
        commit_id="c1", ov_session_id="s1", agent_id="main", keep_recent_count=0, generation=0, requested_at=0.0
    )
    with caplog.at_level(logging.INFO, logger=ov_steps.__name__):
        ov_steps.refresh_quietly(cast(Any, ctx), cast(Any, SimpleNamespace(get_context=print)), request)
    assert len(reads) == min(failures + 1, 2)
    assert bool(redis.deleted) == dropped
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert bool(warned) == dropped, caplog.text
