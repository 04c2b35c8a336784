"""An ASGI app served by a real uvicorn (uvloop, httptools, as ``ovstream rpc``) on a
loopback port, in a thread, for tests that need real TCP: kept-alive and reset
connections, body limits, what the server does with a bad request."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

START_TIMEOUT_S = 10.0


@contextmanager
def served(app: Any) -> Iterator[int]:
    """Serve ``app`` on 127.0.0.1 (a free port, yielded) until the block ends."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, loop="uvloop", http="httptools")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = int(server.servers[0].sockets[0].getsockname()[1])
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)


class KeptConnection:
    """One HTTP/1.1 connection used for every request: a request after one the server
    closed or reset the connection on raises instead of quietly reconnecting."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.conn.auto_open = 0  # never reconnect behind the test's back
        self.conn.connect()

    def post(self, path: str, body: bytes, **headers: str) -> tuple[int, bytes, dict[str, str]]:
        self.conn.request("POST", path, body=body, headers={"content-type": "application/json", **headers})
        return self._answer()

    def get(self, path: str) -> tuple[int, bytes, dict[str, str]]:
        self.conn.request("GET", path)
        return self._answer()

    def health(self, *, timeout_s: float = 30.0) -> int:
        """``/healthz`` on this connection, asked again while it says 503 (its Redis ping over
        the 2 s bound: a starved machine, not a server a bad request broke), up to
        ``timeout_s``; the last status."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.get("/healthz")[0]
            if status != 503 or time.monotonic() > deadline:
                return status
            time.sleep(0.2)

    def _answer(self) -> tuple[int, bytes, dict[str, str]]:
        response = self.conn.getresponse()
        body = response.read()
        if response.will_close:
            raise AssertionError(f"the server closes the connection after a {response.status}: {body[:200]!r}")
        return response.status, body, {k.lower(): v for k, v in response.getheaders()}

    def close(self) -> None:
        self.conn.close()
