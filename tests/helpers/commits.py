"""Shared by the commit-chain tests on a real Redis with the fake OV: a commit whose phase 2
runs, and a Redis blip at the moment its extraction check is scheduled."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from core.config import Settings
from core.events import CommitRequest
from core.session import SessionAddress
from workers.commits import schedule
from workers.commits.context import context_of
from workers.commits.request import request_commit
from workers.commits.run import run_commit
from workers.dev.fake_ov.app import FakeOV


def running_commit(redis_client: Any, settings: Settings, fake: FakeOV, sid: str, said: str) -> CommitRequest:
    """A commit OV took (phase 1) of session ``sid``, whose user said ``said``."""
    client = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov")
    messages = [{"role": "user", "content": said}, {"role": "assistant", "content": "noted"}]
    client.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": messages}).raise_for_status()
    request = request_commit(
        redis_client, settings, SessionAddress(sid, "main", None), reason="compact", keep_recent_count=0
    )
    assert run_commit(redis_client, context_of(settings), request).status == "running"
    return request


def redis_away_at_the_first_check(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The first extraction check scheduled meets Redis away (a failover's moment); the later
    ones go through. The calls, as made."""
    real, calls = schedule.schedule_extraction_check, []

    def away_once(*args: Any, **kwargs: Any) -> None:
        calls.append(args)
        if len(calls) == 1:
            raise redis.exceptions.ConnectionError("Connection refused")
        real(*args, **kwargs)

    monkeypatch.setattr(schedule, "schedule_extraction_check", away_once)
    return calls
