"""Shared by the FakeOV tests: an HTTP client on the fake and envelope assertions."""

from __future__ import annotations

from typing import Any

import httpx

from workers.dev.fake_ov.app import FakeOV

S = "/api/v1/sessions"


def http(fake: FakeOV, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=fake.transport(), base_url="http://ov", headers=headers)


async def ok(resp: Any) -> Any:
    r = await resp
    body = r.json()
    assert r.status_code == 200 and body["status"] == "ok", body
    return body["result"]


async def error(resp: Any, status: int, code: str) -> dict[str, Any]:
    r = await resp
    body = r.json()
    assert (r.status_code, body["status"], body["error"]["code"]) == (status, "error", code), body
    return body["error"]


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["parts"][0]["text"] for m in messages]


async def add(c: httpx.AsyncClient, sid: str, *contents: str, role: str = "user") -> dict[str, Any]:
    return await ok(
        c.post(f"{S}/{sid}/messages/batch", json={"messages": [{"role": role, "content": t} for t in contents]})
    )
