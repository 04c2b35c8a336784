"""Exceptions as redis-py raises them, for the tests of how they are told apart."""

from __future__ import annotations

REDIS_CONNECTION = "/venv/lib/python3.11/site-packages/redis/asyncio/connection.py"
"""A path of redis-py's asyncio connection module (where it leaks transport faults, #4287)."""


def raised_in(filename: str, exc: BaseException) -> BaseException:
    """``exc`` as raised by code of ``filename`` (its frame in the traceback)."""
    try:
        exec(compile("raise exc", filename, "exec"), {"exc": exc})
    except BaseException as raised:
        return raised
    raise AssertionError("not raised")
