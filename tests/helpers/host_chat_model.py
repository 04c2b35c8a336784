"""A scripted OpenAI-compatible chat model for the real-host tier: it records
every request body OpenClaw sends, so tests assert on what the model received.

Answers are a pure function of the request:

- The latest user text holds ``[[tool:NAME {json args}]]`` directives: they
  are called one per request, in order (``NAME`` may be any tool, those behind
  OpenClaw's Tool Search go through ``tool_call``). The host's own follow-ups of a
  subagent run (the announce telling the requester a background task completed, the
  wake telling an orchestrator its descendants settled) quote the task: its directives
  were followed once already, so they are not followed again.
- Otherwise: ``ok <n>: <first 60 chars of the latest user text>`` where ``n``
  counts the request's messages, so a test can tell requests apart.

Streaming (``stream: true``, what OpenClaw's openai-completions transport uses)
is answered as server-sent events. ``GET /requests`` returns the recorded
bodies; ``POST /reset`` forgets them. Every body is also appended to
``--record`` as JSON lines when given.

Run: ``python tests/helpers/host_chat_model.py --port N [--record FILE]``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from workers.dev.model_answers import content_text

MODEL_ID = "scripted"
_TOOL_RE = re.compile(r"\[\[tool:([A-Za-z0-9_.-]+)\s*(\{.*?\})?\]\]", re.S)


INTERNAL_CONTEXT_MARK = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"
HOST_FOLLOW_UPS = ("A background task completed.", "Your prior run ended while waiting for descendant")


def latest_user_index(messages: list[dict[str, Any]]) -> int:
    """The latest user message the person wrote (not OpenClaw's internal-context block)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user" and INTERNAL_CONTEXT_MARK not in content_text(m.get("content")):
            return i
    return -1


def plan_answer(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(text, tool calls) for one chat request.

    The directives of the latest user text run one per request, in order: the
    k-th tool result after that message asks for directive k+1. A tool the
    request does not offer directly goes through OpenClaw's ``tool_call``
    (tools behind Tool Search).
    """
    messages = body.get("messages") or []
    last_user = latest_user_index(messages)
    text = content_text(messages[last_user].get("content")) if last_user >= 0 else ""
    done = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    directives = [] if any(mark in text for mark in HOST_FOLLOW_UPS) else _TOOL_RE.findall(text)
    if done < len(directives):
        name, raw = directives[done]
        args = json.loads(raw) if raw else {}
        if name not in offered and "tool_call" in offered:
            name, args = "tool_call", {"id": name, "args": args}
        return "", [(name, args)]
    words = text.strip().splitlines()[0] if text.strip() else ""
    return f"ok {len(messages)}: {words[:60]}", []


class _State:
    def __init__(self, record: Path | None) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.record = record

    def add(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(body)
            if self.record is not None:
                with self.record.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(body) + "\n")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: _State

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "tests"}]})
        elif self.path == "/requests":
            with self.state.lock:
                self._json(200, list(self.state.requests))
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        if self.path == "/reset":
            with self.state.lock:
                self.state.requests.clear()
            self._json(200, {"ok": True})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = json.loads(raw or b"{}")
        self.state.add(body)
        text, calls = plan_answer(body)
        tool_calls = [
            {
                "index": i,
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
        finish = "tool_calls" if tool_calls else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        cid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_calls:
                message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in tool_calls]
            self._json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": MODEL_ID,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )
            return
        delta: dict[str, Any] = {"role": "assistant"}
        if text:
            delta["content"] = text
        if tool_calls:
            delta["tool_calls"] = tool_calls
        chunks = [
            {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
        ]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for chunk in chunks:
            chunk.update({"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID})
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def serve(host: str, port: int, record: Path | None = None) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"state": _State(record)})
    return ThreadingHTTPServer((host, port), handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path)
    args = parser.parse_args()
    serve(args.host, args.port, args.record).serve_forever()


if __name__ == "__main__":
    main()
