"""The one deadline wait of the tests: poll a check until it holds.

A deadline only bounds a hang; no test asserts on how long anything took.
``wait_until`` polls from sync code, ``eventually`` from a coroutine; both
return the check's first truthy value and fail naming what was awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0


def _failure(what: str, timeout_s: float, last: Any) -> AssertionError:
    return AssertionError(f"{what}: not reached within {timeout_s:g}s (last: {last!r})")


def wait_until(
    check: Callable[[], T], what: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, interval_s: float = 0.2
) -> T:
    """``check()``'s first truthy value, polled every ``interval_s``; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise _failure(what, timeout_s, last)
        time.sleep(interval_s)


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.01,
) -> T:
    """``wait_until`` for coroutines: ``check`` may be sync or async; the loop keeps running between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = check()
        if asyncio.iscoroutine(last) or isinstance(last, Awaitable):
            last = await last
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise _failure(what, timeout_s, last)
        await asyncio.sleep(interval_s)
