"""Capture's watch on OV (workers.capture.ov_watch) over a real OVClient: it reports what OV
answers, and a cancel ends it whenever it comes, even as OV's answer arrives.

The second is the CI failure of stop 64: Python 3.11's ``asyncio.wait_for`` returns the
result when the cancel of its caller comes as the awaited call finishes (CPython gh-86296),
so the watch's loop ran on after the worker cancelled it, and ``ovstream capture`` outlived
its SIGTERM. The probe is frequent while OV refuses the key, which made the race likely.
"""

from __future__ import annotations

import asyncio

import httpx

from core.ov.client import OVClient
from workers.capture.ov_watch import OvWatch


class HeldAnswers:
    """A MockTransport handler that holds each answer until the test lets it go."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.asked = asyncio.Event()
        self.gate: asyncio.Future[None] | None = None

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.gate = asyncio.get_running_loop().create_future()
        self.asked.set()
        await self.gate
        self.asked.clear()
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "ok", "healthy": True, "version": "0.5.2"})
        body = {"status": "error", "error": {"code": "UNAUTHENTICATED", "message": "Invalid API Key"}}
        return httpx.Response(self.status, json=body)


def _watch(answers: HeldAnswers) -> tuple[OvWatch, OVClient]:
    ov = OVClient("http://ov.test:1933", transport=httpx.MockTransport(answers), retries=0, backoff=0)
    return OvWatch(ov.reachability, "http://ov.test:1933", "test", every_s=0.01), ov


async def test_the_watch_says_ov_refuses_the_key() -> None:
    answers = HeldAnswers(401)
    watch, ov = _watch(answers)
    task = asyncio.create_task(watch.run())
    for _ in range(2):  # /health, then the key check
        await answers.asked.wait()
        assert answers.gate is not None
        answers.gate.set_result(None)
        await asyncio.sleep(0)
    for _ in range(100):
        if watch.state != "ok":
            break
        await asyncio.sleep(0.01)
    assert watch.state.startswith("refuses key: UNAUTHENTICATED")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await ov.aclose()


async def test_a_cancel_that_comes_as_ov_answers_ends_the_watch() -> None:
    """Each probe step (the /health call, the key check) answered in the same turn of the loop
    as the cancel: the watch must end every time."""
    for step in range(2):
        answers = HeldAnswers(401)
        watch, ov = _watch(answers)
        task = asyncio.create_task(watch.run())
        for earlier in range(step + 1):
            await answers.asked.wait()
            assert answers.gate is not None
            gate = answers.gate
            if earlier < step:
                gate.set_result(None)
                await asyncio.sleep(0)
        gate.set_result(None)  # OV answers ...
        task.cancel()  # ... as the worker stops
        done, _pending = await asyncio.wait([task], timeout=2.0)
        assert done, f"the watch ran on after its cancel (answer {step + 1} came with it)"
        assert task.cancelled()
        await ov.aclose()
