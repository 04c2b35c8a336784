"""Plain-HTTP helpers of the OV contract tests: envelope checks and message builders."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.helpers.transcripts import text_msg

__all__ = ["BUDGET", "commit_and_wait", "err", "ok", "sid", "text_msg"]

BUDGET = {"token_budget": 128_000}


def sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def ok(r: httpx.Response) -> Any:
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and body.get("error") is None, body
    return body["result"]


def err(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["status"] == "error", body
    assert body["error"]["code"] == code, body
    assert body.get("result") is None
    return body["error"]


def commit_and_wait(http: httpx.Client, wait_task, session_id: str, **body: Any) -> tuple[dict, dict]:
    accepted = ok(http.post(f"/api/v1/sessions/{session_id}/commit", json=body))
    assert accepted["status"] == "accepted", accepted
    return accepted, wait_task(http, accepted["task_id"])
