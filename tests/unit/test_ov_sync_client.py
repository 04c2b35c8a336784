"""The sync OV client (core.ov.sync_client) is the async one's twin: for each call the commit
jobs make and each way OV answers, both send the same requests (method, URL, identity headers,
body, timeout) and end the same way (the same decoded answer, or the same error after the same
number of tries)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from core.ov import calls
from core.ov.client import OVClient
from core.ov.envelope import OVError
from core.ov.sync_client import OVSyncClient
from tests.helpers.ov import Recorder, err, ok
from workers.dev.fake_ov.app import FakeOV

SESSION = {"session_id": "s", "message_count": 3, "commit_count": 2, "uri": "viking://session/s"}
TASK = {"task_id": "t", "status": "running"}
CONTEXT = {"latest_archive_overview": "o", "messages": [{"id": "m", "role": "user", "parts": [{"type": "text"}]}]}

CALLS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "get_session": ("get_session", ("s/1",), {}),
    "commit": ("commit", ("s",), {"keep_recent_count": 0, "enable_working_memory": True}),
    "get_task": ("get_task", ("t",), {}),
    "session_commit_tasks": ("session_commit_tasks", ("s",), {"limit": 5}),
    "get_context": ("get_context", ("s",), {"token_budget": 100}),
}
ANSWERS: dict[str, list[Any]] = {
    "answered": [ok(SESSION | TASK | CONTEXT | {"archived": True})],
    "a list answered": [ok([TASK | {"created_at": 1.0}, {"task_id": "u", "status": "completed", "created_at": 2.0}])],
    "503 then answered": [err(503, "UNAVAILABLE"), ok(SESSION | TASK)],
    "503 every time": [err(503, "UNAVAILABLE")],
    "404": [err(404, "NOT_FOUND")],
    "401": [err(401, "UNAUTHENTICATED")],
    "connection refused then answered": [httpx.ConnectError("refused"), ok(TASK | SESSION)],
    "read timeout": [httpx.ReadTimeout("slow")],
    "OV's own file read mid-write": [err(400, "INVALID_ARGUMENT", "Expecting value: line 1 column 1 (char 0)"), ok({})],
    "no envelope": [httpx.Response(200, json={"no": "envelope"})],
    "a shape it cannot decode": [ok({"commit_count": "many", "status": 3})],
}


def _ending(run: Any) -> tuple[str, Any]:
    try:
        return "answer", run()
    except OVError as exc:
        return "error", (type(exc).__name__, exc.code, exc.status)


def _sent(rec: Recorder) -> list[tuple[Any, ...]]:
    return [
        (
            r.method,
            str(r.url),
            r.headers.get("X-API-Key"),
            r.headers.get("X-OpenViking-Actor-Peer"),
            r.content,
            r.extensions["timeout"],
        )
        for r in rec.requests
    ]


@pytest.mark.parametrize("answers", ANSWERS.values(), ids=list(ANSWERS))
@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
def test_the_sync_client_sends_and_ends_as_the_async_one(call, answers):
    name, args, kwargs = call
    endings, sent = [], []
    for kind in (OVClient, OVSyncClient):
        rec = Recorder(*answers)
        ov = kind("http://ov.test:1933", transport=httpx.MockTransport(rec), api_key="k", retries=2, backoff=0)
        ov = ov.scoped(peer="agent_a")
        method = getattr(ov, name)
        endings.append(
            _ending(lambda: asyncio.run(method(*args, **kwargs)) if kind is OVClient else method(*args, **kwargs))
        )
        sent.append(_sent(rec))
    assert endings[0] == endings[1]
    assert sent[0] == sent[1]
    assert sent[0] and all(s[2:4] == ("k", "agent_a") for s in sent[0])


def test_the_fake_ov_answers_a_sync_client_after_its_latency_on_its_own_thread():
    """A thread with no event loop (a commit job's, a poller's) gets the fake's latency as a
    sleep, and threads asking side by side are answered one at a time, none lost."""
    fake = FakeOV(phase2_reads_until_done=0)
    fake.latency_s = 0.01
    ov = OVSyncClient("http://ov", transport=fake.transport())
    for i in range(8):
        ov.send(calls.get_session(f"s{i}", auto_create=True))
    counts: list[int] = []

    def read(i: int) -> None:
        counts.append(ov.get_session(f"s{i}").message_count)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == [0] * 8
    assert len(fake.calls) == 16
