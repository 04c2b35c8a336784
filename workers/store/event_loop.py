"""What an event loop says of a connection its peer dropped, said once and at its level.

When a peer ends a connection with an error (a TLS server refusing a client without a
certificate, a Redis node killed mid-read), the transport hands that error to the stream
protocol twice: to the ``StreamReader`` the Redis client reads from (which raises it, and the
client says what happened) and to the protocol's own "closed" future, which nobody awaits.
``StreamReaderProtocol.__del__`` marks that copy as seen, but the protocol, its future and the
error's traceback form a cycle, and when the garbage collector finalizes the future first,
asyncio logs "Future exception was never retrieved" at ERROR with a traceback: a second,
alarming report of an error already handled. ``quiet_dropped_connections`` logs that copy at
DEBUG; every other report goes to the loop's default handler as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_NEVER_RETRIEVED = "Future exception was never retrieved"
_TRANSPORT_CODE = ("sslproto", "selector_events", "/ssl.py", "uvloop/")
"""Where a transport reads: an error raised there reached the reader too."""


def traceback_files(exc: BaseException) -> Iterator[str]:
    """The files of the frames ``exc`` was raised through, outermost first."""
    tb = exc.__traceback__
    while tb is not None:
        yield tb.tb_frame.f_code.co_filename
        tb = tb.tb_next


def raised_by_a_transport(exc: BaseException) -> bool:
    """``exc`` is an ``OSError`` (``ssl.SSLError``, ``ConnectionResetError``...) raised while a
    transport read or wrote, i.e. one the connection's stream reader was handed as well."""
    return isinstance(exc, OSError) and any(part in file for file in traceback_files(exc) for part in _TRANSPORT_CODE)


def _handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    exc = context.get("exception")
    if context.get("message") == _NEVER_RETRIEVED and exc is not None and raised_by_a_transport(exc):
        log.debug("a dropped connection's error, already handed to its reader: %r", exc)
        return
    loop.default_exception_handler(context)


def quiet_dropped_connections(loop: asyncio.AbstractEventLoop) -> None:
    """Have ``loop`` log the unawaited copy of a dropped connection's error at DEBUG."""
    loop.set_exception_handler(_handler)
