"""A deterministic OpenAI-compatible model server, so OpenViking runs offline.

OpenViking 0.5.2 needs an embedding provider and an LLM. This server answers
both from pure functions of the request, so the same conversation always gives
the same memories and summaries:

- ``GET /v1/models`` lists one model.
- ``POST /v1/embeddings``: hashed bag-of-words vectors (lowercase words and CJK
  characters, each hashed with a sign into ``dimension`` slots, L2-normalised).
  Honours ``encoding_format: "base64"`` (the openai SDK's default).
- ``POST /v1/chat/completions`` recognises OV's prompts (see ``workers.dev.model_answers``):
  phase-2 memory extraction gets a restricted-Python SDK program, working-memory
  (archive summary) prompts get a 7-section summary, anything else a short answer.
- ``POST /admin/mode {"mode": "normal"|"garbage"|"error"|"drop-merge"}`` switches how chat
  is answered: ``garbage`` answers nonsense (phase 2 fails), ``error`` answers HTTP 500,
  ``drop-merge`` answers OV's merge prompt with ``sdk.commit()`` alone (a model that loses
  the overlapping extractions of one user: their tasks complete with no memories).
  ``GET /admin/stats`` counts requests per kind.

``start_model_server(host, port)`` runs it on a thread (tests, the demo);
``ovstream model-server --port N`` runs it in the foreground.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import math
import re
import signal
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from workers.dev import model_answers

log = logging.getLogger(__name__)

DEFAULT_DIMENSION = 64
DEFAULT_MODEL = "ovstream-deterministic"
MODES = ("normal", "garbage", "error", "drop-merge")
GARBAGE_ANSWER = "~~ garbage: this is not a program, not JSON, and not a summary ~~"

_TOKEN_RE = re.compile(r"[a-z0-9]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def tokenize(text: str) -> list[str]:
    """Lowercase ASCII/latin words and single CJK/kana/Hangul characters."""
    return _TOKEN_RE.findall(text.lower())


def embed(text: str, dimension: int = DEFAULT_DIMENSION) -> list[float]:
    """Hashed signed bag of words, L2-normalised; never the zero vector."""
    vec = [0.0] * dimension
    for token in tokenize(text):
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        h = int.from_bytes(digest, "little")
        vec[h % dimension] += 1.0 if (h >> 63) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


@dataclass
class ServerState:
    dimension: int = DEFAULT_DIMENSION
    model: str = DEFAULT_MODEL
    mode: str = "normal"
    log_dir: Path | None = None
    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seq: int = 0

    def record(self, kind: str, request: Any, answer: Any) -> None:
        with self.lock:
            self.counts[kind] += 1
            self.seq += 1
            seq = self.seq
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            path = self.log_dir / f"{seq:05d}-{kind}.json"
            path.write_text(
                json.dumps({"kind": kind, "request": request, "answer": answer}, ensure_ascii=False, indent=1),
                encoding="utf-8",
            )


class _Handler(BaseHTTPRequestHandler):
    server_version = "ovstream-model/1"
    protocol_version = "HTTP/1.1"

    @property
    def state(self) -> ServerState:
        server = self.server
        assert isinstance(server, _ModelHTTPServer)
        return server.state

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.state.model, "object": "model", "created": 0, "owned_by": "ovstream"}],
                },
            )
        elif path == "/admin/stats":
            with self.state.lock:
                self._send(200, {"mode": self.state.mode, "counts": dict(self.state.counts)})
        elif path in ("", "/health"):
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        try:
            body = self._body()
        except (ValueError, UnicodeDecodeError):
            self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        if path in ("/v1/embeddings", "/embeddings"):
            self._send(200, self._embeddings(body))
        elif path in ("/v1/chat/completions", "/chat/completions"):
            status, answer = self._chat(body)
            self._send(status, answer)
        elif path == "/admin/mode":
            mode = body.get("mode") if isinstance(body, dict) else None
            if mode not in MODES:
                self._send(400, {"error": f"mode must be one of {MODES}"})
                return
            self.state.mode = mode
            self._send(200, {"mode": mode})
        else:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input", "")
        if isinstance(inputs, str):
            inputs = [inputs]
        dim = int(body.get("dimensions") or self.state.dimension)
        as_b64 = body.get("encoding_format") == "base64"
        data = []
        tokens = 0
        for i, text in enumerate(inputs):
            text = text if isinstance(text, str) else json.dumps(text)
            vec = embed(text, dim)
            tokens += len(tokenize(text))
            value: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode() if as_b64 else vec
            data.append({"object": "embedding", "index": i, "embedding": value})
        self.state.record("embedding", None, None)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", self.state.model),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body.get("messages") or []
        tools = body.get("tools") or []
        kind, content, tool_calls = model_answers.answer(messages, tools)
        if self.state.mode == "error":
            self.state.record("error", body, None)
            return 500, {"error": {"message": "model server in error mode", "type": "server_error"}}
        if self.state.mode == "garbage":
            kind, content, tool_calls = "garbage", GARBAGE_ANSWER, []
        if self.state.mode == "drop-merge" and kind == "merge":  # a model that loses a merge
            kind, content, tool_calls = "merge-dropped", "sdk.commit()", []
        self.state.record(kind, body, {"content": content, "tool_calls": tool_calls})
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
                for i, (name, args) in enumerate(tool_calls)
            ]
        prompt_chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
        completion_tokens = max(1, len(content or "") // 4)
        return 200, {
            "id": f"chatcmpl-{hashlib.sha1(json.dumps(messages).encode()).hexdigest()[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.state.model),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_chars // 4 + completion_tokens,
            },
        }


class ModelServerHandle:
    """A running model server: ``.url`` (ends in ``/v1``), ``.set_mode()``, ``.stop()``."""

    def __init__(self, httpd: _ModelHTTPServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        host, port = httpd.server_address[:2]
        self.host, self.port = str(host), int(port)
        self.base_url = f"http://{self.host}:{self.port}"
        self.url = f"{self.base_url}/v1"

    @property
    def state(self) -> ServerState:
        return self._httpd.state

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.state.mode = mode

    def counts(self) -> dict[str, int]:
        with self.state.lock:
            return dict(self.state.counts)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ModelServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _ModelHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: ServerState) -> None:
        super().__init__(address, _Handler)
        self.state = state


def _make_server(host: str, port: int, state: ServerState) -> _ModelHTTPServer:
    return _ModelHTTPServer((host, port), state)


def start_model_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    dimension: int = DEFAULT_DIMENSION,
    mode: str = "normal",
    log_dir: str | Path | None = None,
) -> ModelServerHandle:
    """Serve on a daemon thread; ``port=0`` picks a free one (see ``handle.port``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    state = ServerState(dimension=dimension, mode=mode, log_dir=Path(log_dir) if log_dir else None)
    httpd = _make_server(host, port, state)
    thread = threading.Thread(target=httpd.serve_forever, name="ovstream-model-server", daemon=True)
    thread.start()
    return ModelServerHandle(httpd, thread)


def add_model_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8790, help="port (default 8790; 0 = any free)")
    parser.add_argument(
        "--dimension", type=int, default=DEFAULT_DIMENSION, help=f"embedding dimension (default {DEFAULT_DIMENSION})"
    )
    parser.add_argument("--mode", choices=MODES, default="normal", help="chat answer mode")
    parser.add_argument("--log-dir", default=None, help="write every chat request/answer here as JSON")


def cli_model_server(settings: Any, args: argparse.Namespace) -> int:
    """``ovstream model-server``: serve in the foreground until interrupted."""
    state = ServerState(dimension=args.dimension, mode=args.mode, log_dir=Path(args.log_dir) if args.log_dir else None)
    httpd = _make_server(args.host, args.port, state)
    host, port = str(httpd.server_address[0]), int(httpd.server_address[1])
    print(f"model server on http://{host}:{port}/v1 (mode {args.mode}, dimension {args.dimension})", flush=True)

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0
