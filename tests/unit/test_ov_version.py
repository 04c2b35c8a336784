"""The OV version ovstream speaks, judged against what a server reports (core.ov.version)."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.config import Settings
from core.ov.version import SPOKEN, check_at_start, judge_version
from workers.dev.local_redis import free_port


@pytest.mark.parametrize(
    ("reported", "strict", "level"),
    [
        (SPOKEN, True, "ok"),
        ("0.5.0", True, "ok"),  # a patch release keeps the API
        ("0.5.9-rc1", True, "ok"),
        ("v0.5.2", True, "ok"),
        ("0.6.0", True, "refuse"),
        ("0.4.9", True, "refuse"),
        ("1.5.2", True, "refuse"),
        ("0.6.0", False, "warn"),
        (None, True, "warn"),  # says nothing: not refused, said
        ("", True, "warn"),
        ("dev", True, "warn"),
        (52, True, "warn"),
    ],
)
def test_the_verdict_on_a_reported_version(reported, strict, level):
    verdict = judge_version(reported, strict=strict)
    assert verdict.level == level
    if level != "ok":
        assert SPOKEN in verdict.message


def test_a_refusal_says_what_to_do():
    message = judge_version("0.6.1").message
    assert "openviking==0.5.2" in message and 'ovVersionCheck = "warn"' in message and "0.6.1" in message


class _Health(BaseHTTPRequestHandler):
    version: object = SPOKEN

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok", "healthy": True, "version": self.version}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ov_reporting():
    servers = []

    def start(version: object) -> str:
        handler = type("Health", (_Health,), {"version": version})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("version", "check", "starts", "logged"),
    [
        (SPOKEN, "refuse", True, "speaks"),
        ("0.6.0", "refuse", False, "refuses to start"),
        ("0.6.0", "warn", True, "at your own risk"),
    ],
)
def test_a_process_checks_the_ov_it_starts_against(ov_reporting, caplog, version, check, starts, logged):
    settings = Settings(base_url=ov_reporting(version), ov_version_check=check)
    with caplog.at_level(logging.INFO, logger="core.ov.version"):
        assert check_at_start(settings, "ovstream test") is starts
    assert logged in caplog.text


def test_an_ov_not_answering_yet_is_not_refused(caplog):
    settings = Settings(base_url=f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.INFO, logger="core.ov.version"):
        assert check_at_start(settings, "ovstream test", timeout_s=2.0)
    assert "not checked" in caplog.text
