"""``ovstream capture``: a capture worker as a process (signals stop it cleanly; a refused
Redis configuration exits 2)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

import uvloop

from core.config import Settings
from core.ov.version import check_at_start
from workers.capture.worker import CaptureWorker
from workers.liveness import LIVENESS_BEAT_S, LivenessBeat
from workers.store.connection import RedisConfigError
from workers.store.event_loop import quiet_dropped_connections

log = logging.getLogger(__name__)


def _shard_list(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--consumer", default=None, help="consumer name (default host-pid-random)")
    parser.add_argument(
        "--shards",
        type=_shard_list,
        default=None,
        help="shard numbers to consume, of any generation, e.g. 0,1 (default all)",
    )
    parser.add_argument("--burst", action="store_true", help="exit once the streams are caught up")


def cli_capture(settings: Settings, args: argparse.Namespace) -> int:
    if not check_at_start(settings, "ovstream capture"):
        return 2
    worker = CaptureWorker(settings, consumer=args.consumer, shards=args.shards, burst=args.burst)

    alive = LivenessBeat(settings, "capture")

    async def beating() -> None:  # on the worker's own loop: a stuck loop stops beating
        while True:
            alive.beat()
            await asyncio.sleep(LIVENESS_BEAT_S)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        quiet_dropped_connections(loop)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        beat = asyncio.create_task(beating(), name="liveness")
        try:
            await worker.run()
        finally:
            beat.cancel()
            alive.close()

    try:
        uvloop.run(main())  # the faster event loop, as the RPC uses
    except RedisConfigError as exc:
        log.error("%s", exc)
        return 2
    return 0
