"""The unawaited copy of a dropped connection's error is said at DEBUG, not as an ERROR with a
traceback; anything else a loop reports still reaches its default handler."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl

import pytest

from workers.store.event_loop import quiet_dropped_connections, raised_by_a_transport

TRANSPORT_FILE = "uvloop/sslproto.pyx"
"""A file named as uvloop's TLS transport names its own."""


def _raised(exc: BaseException, *, by_transport: bool) -> BaseException:
    """``exc`` raised in a frame of ``TRANSPORT_FILE`` (or of a file of ours)."""
    scope: dict[str, object] = {}
    exec(compile("def read(exc):\n    raise exc\n", TRANSPORT_FILE if by_transport else "ours.py", "exec"), scope)
    try:
        scope["read"](exc)  # type: ignore[operator]
    except BaseException as raised:
        return raised
    raise AssertionError("not raised")


def _drop_unretrieved(exc: BaseException) -> None:
    loop = asyncio.new_event_loop()
    quiet_dropped_connections(loop)
    try:
        future = loop.create_future()
        future.set_exception(exc)
        del future
        gc.collect()
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("exc", "by_transport", "quiet"),
    [
        (ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required"), True, True),
        (ConnectionResetError(104, "Connection reset by peer"), True, True),
        (ssl.SSLError(1, "raised by our own code"), False, False),
        (ValueError("not a connection's"), True, False),
    ],
)
def test_only_a_transports_error_left_unretrieved_is_quiet(
    caplog: pytest.LogCaptureFixture, exc: BaseException, by_transport: bool, quiet: bool
) -> None:
    raised = _raised(exc, by_transport=by_transport)
    assert raised_by_a_transport(raised) is quiet
    with caplog.at_level(logging.DEBUG):
        _drop_unretrieved(raised)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    if quiet:
        assert errors == []
        assert any("already handed to its reader" in r.getMessage() for r in caplog.records)
    else:
        assert [r.getMessage().splitlines()[0] for r in errors] == ["Future exception was never retrieved"]
