"""workers.rpc.bounded: the same answers, errors and cancellation as asyncio.timeout_at,
with no timer for a call that never waits; on both event loops the RPC may run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from workers.rpc.bounded import bounded

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def run(main: Callable[[], Coroutine[Any, Any, Any]], loop: str) -> Any:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main())


class Failed(Exception):
    pass


async def at_once() -> str:
    return "answer"


async def fails_at_once() -> str:
    raise Failed("before waiting")


async def waits(seconds: float, then: str = "answer") -> str:
    await asyncio.sleep(0)  # a bare yield to the loop, then a future
    await asyncio.sleep(seconds)
    return then


async def fails_after_waiting() -> str:
    await asyncio.sleep(0.01)
    raise Failed("after waiting")


async def catches_one_error() -> str:
    future = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, future.set_exception, Failed("from the future"))
    try:
        await future
    except Failed:
        await asyncio.sleep(0.01)  # waits again after handling it
        return "recovered"
    return "not reached"


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (at_once, "answer"),
        (lambda: waits(0.01), "answer"),
        (catches_one_error, "recovered"),
    ],
    ids=["never waits", "waits within the deadline", "handles an error it awaited"],
)
def test_answers_as_awaiting_it_would(loop: str, call: Callable[[], Coroutine[Any, Any, str]], expected: str) -> None:
    async def main() -> str:
        return await bounded(call(), 1.0)

    assert run(main, loop) == expected


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("call", [fails_at_once, fails_after_waiting], ids=["before waiting", "after waiting"])
def test_its_errors_reach_the_caller(loop: str, call: Callable[[], Coroutine[Any, Any, str]]) -> None:
    async def main() -> str:
        return await bounded(call(), 1.0)

    with pytest.raises(Failed):
        run(main, loop)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_call_past_its_deadline_is_cancelled_and_times_out(loop: str) -> None:
    cleaned: list[str] = []

    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append("finally ran")
        return "late"

    async def main() -> tuple[bool, bool]:
        with pytest.raises(TimeoutError):
            await bounded(slow(), 0.05)
        current = asyncio.current_task()
        assert current is not None
        return current.cancelling() == 0, current.cancelled()

    assert run(main, loop) == (True, False)  # the timeout's cancel was taken back, as asyncio.timeout does
    assert cleaned == ["finally ran"]


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_cancelling_the_caller_is_a_cancellation_not_a_timeout(loop: str) -> None:
    async def main() -> str:
        task = asyncio.ensure_future(bounded(waits(10), 5.0))
        await asyncio.sleep(0.02)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "not cancelled"

    assert run(main, loop) == "cancelled"


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_the_deadline_counts_from_the_call_not_from_its_first_wait(loop: str) -> None:
    async def busy_then_waits() -> str:
        loop_time = asyncio.get_running_loop().time
        started = loop_time()
        while loop_time() - started < 0.1:  # works without waiting past the deadline
            pass
        await asyncio.sleep(0.5)
        return "late"

    async def main() -> str:
        try:
            return await bounded(busy_then_waits(), 0.05)
        except TimeoutError:
            return "timed out"

    assert run(main, loop) == "timed out"


def test_a_call_that_never_waits_arms_no_timer() -> None:
    armed: list[float] = []

    async def main() -> str:
        loop = asyncio.get_running_loop()
        call_at = loop.call_at

        def counted(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            armed.append(when)
            return call_at(when, *args, **kwargs)

        loop.call_at = counted  # type: ignore[method-assign]
        assert await bounded(at_once(), 1.0) == "answer"
        assert armed == []
        assert await bounded(waits(0), 1.0) == "answer"
        return "done"

    assert run(main, "asyncio") == "done"
    assert len(armed) == 1  # the one call that waited had its deadline armed
