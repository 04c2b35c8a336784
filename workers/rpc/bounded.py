"""A timeout that costs nothing when the awaited call never waits.

Assemble must answer within ``assembleTimeoutS`` whatever Redis and OV do, but a
snapshot hit is answered from process memory: its coroutine runs to the end without
suspending once. ``asyncio.timeout`` arms a timer on every entry regardless; on uvloop
that timer (start, cancel, its handle) cost about a quarter of a snapshot hit's time in
the RPC (bench/RESULTS.md, "The RPC against its floor"). ``bounded`` runs the coroutine
up to its first suspension with no timer, and arms the same deadline only if it got
there: the answer, the errors and the cancellation are what ``asyncio.timeout_at`` gives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


async def bounded(call: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """``await call``, raising TimeoutError once ``timeout_s`` passed since this started."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        waiting_on = call.send(None)  # runs ``call`` until it first waits (or ends)
    except StopIteration as done:
        return cast(T, done.value)
    async with asyncio.timeout_at(deadline):
        return await _Resumed(call, waiting_on)


class _Resumed(Generic[T]):
    """The rest of a coroutine that has already yielded ``waiting_on`` to its task: awaiting
    this passes that to the task and goes on as ``yield from`` would (values, exceptions,
    cancellation and closing all reach the coroutine)."""

    __slots__ = ("call", "waiting_on")

    def __init__(self, call: Coroutine[Any, Any, T], waiting_on: Any) -> None:
        self.call = call
        self.waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, T]:
        call, waiting_on = self.call, self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                call.close()
                raise
            except BaseException as exc:  # the task's cancellation among them: the coroutine handles it
                try:
                    waiting_on = call.throw(exc)
                except StopIteration as done:
                    return cast(T, done.value)
            else:
                try:
                    waiting_on = call.send(sent)
                except StopIteration as done:
                    return cast(T, done.value)
