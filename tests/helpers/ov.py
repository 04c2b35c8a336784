"""Shared by the OVClient tests: canned OV envelopes and a recording MockTransport handler."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from core.ov.client import OVClient


def ok(result: Any) -> httpx.Response:
    return httpx.Response(200, json={"status": "ok", "result": result, "error": None})


def err(status: int, code: str, message: str = "boom", details: Any = None) -> httpx.Response:
    return httpx.Response(
        status,
        json={"status": "error", "result": None, "error": {"code": code, "message": message, "details": details}},
    )


class Recorder:
    """A MockTransport handler answering from a queue (the last answer repeats)."""

    def __init__(self, *answers: httpx.Response | Exception | Callable) -> None:
        self.answers = list(answers) or [ok({})]
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def body(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)


def client(rec: Recorder, **kw: Any) -> OVClient:
    kw.setdefault("backoff", 0)
    return OVClient("http://ov.test:1933", transport=httpx.MockTransport(rec), **kw)
