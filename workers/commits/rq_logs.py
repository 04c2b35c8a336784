"""RQ's worker log, as what really happens in ``ovstream worker`` (workers.commits.worker):
a Redis outage said once, and no "quitting" from a process that goes on."""

from __future__ import annotations

import logging
import time

import redis as redis_lib

from workers.store.connection import redis_went_away

RQ_RETRY_LINES_APART_S = 5.0
"""RQ's "could not connect ... retrying" lines closer than this to the one before are one
outage: said once (``RQLogsTellTheTruth``)."""


class RQLogsTellTheTruth(logging.Filter):
    """RQ's worker log, as what really happens in ``ovstream worker``.

    RQ logs "Redis connection timeout, quitting..." or "found an unhandled exception,
    quitting..." (with a traceback) when its loop ends on a Redis error, and the process goes
    on: ``work_through_outages`` starts a new RQ worker once Redis answers and says so in one
    line. So those lines are left out (a Redis error) or kept without the word (anything else,
    with its traceback: a bug to see). Its connection retries, one a second while Redis is
    away, are said once an outage."""

    def __init__(self) -> None:
        super().__init__()
        self._last_retry_line = -RQ_RETRY_LINES_APART_S
        self.quit_reason: str | None = None
        """Why RQ's loop last ended on a Redis error (the line left out), for the one line
        ``work_through_outages`` says instead."""

    def take_quit_reason(self) -> str:
        reason, self.quit_reason = self.quit_reason, None
        return reason or "Redis failed"

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if "could not connect to Redis instance" in message:
            now, last = time.monotonic(), self._last_retry_line
            self._last_retry_line = now
            if now - last < RQ_RETRY_LINES_APART_S:
                return False
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "Worker %s: Redis unreachable (%s); dequeueing again every %d s until it answers"
            return True
        if "quitting..." not in message:
            return True
        error = record.exc_info[1] if record.exc_info else None
        if error is None or redis_went_away(error) or isinstance(error, redis_lib.RedisError):
            self.quit_reason = "Redis connection timeout" if error is None else f"{type(error).__name__}: {error}"
            return False  # work_through_outages says what follows, in one line
        record.msg = "Worker %s: its loop ended on an error; ovstream starts a new RQ worker"
        return True


RQ_LOG = RQLogsTellTheTruth()
"""The filter on RQ's worker log of this process (``make_worker`` installs it)."""
