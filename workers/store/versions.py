"""Snapshot versions kept in process, forgotten the moment Redis says they changed.

Assemble asks Redis on every call which snapshot of the session is stored and which turn
was published last (``SNAPSHOT_VERSION``): one round trip, the largest part of a snapshot
hit's CPU after the request itself. ``SnapshotVersions`` keeps those answers, and Redis
itself says when one changes (server-assisted client-side caching): a RESP3 connection of its
own asks for an invalidation message whenever a snapshot or last-turn key is written, expires
or is deleted (``CLIENT TRACKING ON BCAST PREFIX ...``), and pings when it hears nothing.

- While that connection is up, a kept answer costs a dictionary lookup, and any write to
  either key drops it before the next call reads it again.
- An answer read while any invalidation arrived is not kept: its read may have started
  before the write it then missed.
- When the connection drops (or stops answering its pings), everything kept is forgotten and
  every call asks Redis until it is back; kept answers are only ever trusted while it is up.
- Redis Cluster (tracking is per node) and the embedded fakeredis take no part: every call
  asks Redis there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict
from typing import Any

import redis
import redis.asyncio as aioredis

from core.config import Settings
from workers.store.connection import redis_went_away
from workers.store.keys import Keys
from workers.store.scripts import SNAPSHOT_VERSION

log = logging.getLogger(__name__)

KEPT_VERSIONS_BYTES = 16 * 1024 * 1024
"""Most bytes of snapshot versions one process keeps (an entry: its two keys, the four short
fields of the answer and ~600 bytes of objects around them): about 20,000 sessions."""
ENTRY_OVERHEAD = 600
PING_EVERY_S = 1.0
"""A watch connection silent this long is pinged; silent twice as long, it is taken for dead."""
RECONNECT_AFTER_S = 1.0
WATCH_NAME = "ovstream-versions"
"""The watch connection's client name starts with this (then the key prefix, the pid and
which of the process's watches it is)."""


def _entry_bytes(snapshot_key: str, last_turn_key: str, answer: Any) -> int:
    fields = answer if isinstance(answer, (list, tuple)) else ()
    return len(snapshot_key) + len(last_turn_key) + sum(len(f) for f in fields if isinstance(f, bytes)) + ENTRY_OVERHEAD


class NotTracked(Exception):
    """Redis cannot track keys for this connection."""


class SnapshotVersions:
    """``SNAPSHOT_VERSION`` answers for assemble, kept while Redis tracks their keys for us."""

    def __init__(self, client: aioredis.Redis, settings: Settings, max_bytes: int = KEPT_VERSIONS_BYTES) -> None:
        self.client = client
        self.settings = settings
        self.max_bytes = max_bytes
        self.bytes = 0
        """What the kept entries cost, by ``_entry_bytes``."""
        self.watch_name = f"{WATCH_NAME}-{settings.key_prefix}-{os.getpid()}-{id(self):x}"
        self.tracks = not settings.redis_cluster and not settings.embedded_redis
        self._kept: OrderedDict[str, tuple[Any, str, int]] = OrderedDict()
        """snapshot key -> (answer, its last-turn key, the entry's bytes)."""
        self._owners: dict[str, set[str]] = {}
        """last-turn key -> the snapshot keys whose answers hold it (one per agent of the session)."""
        self._live = 0
        """Nonzero while the watch connection is subscribed: its epoch."""
        self._epochs = 0
        self._invalidations = 0
        self._task: asyncio.Task[None] | None = None
        self.hits = 0

    @property
    def live(self) -> bool:
        return self._live != 0

    async def read(self, snapshot_key: str, last_turn_key: str) -> Any:
        """``SNAPSHOT_VERSION`` of the two keys: kept, or read (and kept when it may be)."""
        live = self._live
        if live:
            kept = self._kept.get(snapshot_key)
            if kept is not None and kept[1] == last_turn_key:
                self.hits += 1
                return kept[0]
        seen = self._invalidations
        answer = await SNAPSHOT_VERSION.run(self.client, [snapshot_key, last_turn_key], [])
        if live and self._live == live and self._invalidations == seen:
            self._keep(snapshot_key, last_turn_key, answer)
        return answer

    def _keep(self, snapshot_key: str, last_turn_key: str, answer: Any) -> None:
        self._drop(snapshot_key)
        size = _entry_bytes(snapshot_key, last_turn_key, answer)
        self._kept[snapshot_key] = (answer, last_turn_key, size)
        self.bytes += size
        self._owners.setdefault(last_turn_key, set()).add(snapshot_key)
        while self.bytes > self.max_bytes and self._kept:
            self._drop(next(iter(self._kept)))

    def _drop(self, snapshot_key: str) -> None:
        kept = self._kept.pop(snapshot_key, None)
        if kept is not None:
            self.bytes -= kept[2]
            owners = self._owners.get(kept[1])
            if owners is not None:
                owners.discard(snapshot_key)
                if not owners:
                    del self._owners[kept[1]]

    def invalidate(self, keys: list[bytes] | None) -> None:
        """Redis says ``keys`` changed (None: everything, as after FLUSHALL)."""
        self._invalidations += 1
        if keys is None:
            self._forget()
            return
        for raw in keys:
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            self._drop(key)
            for snapshot_key in list(self._owners.get(key, ())):
                self._drop(snapshot_key)

    def _forget(self) -> None:
        self._kept.clear()
        self._owners.clear()
        self.bytes = 0

    # --- the watch connection ------------------------------------------------------------------

    def start(self) -> None:
        """Run the watch connection in the background (no-op where tracking takes no part)."""
        if self.tracks and self._task is None:
            self._task = asyncio.create_task(self._watch(), name="snapshot-version-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._go_dark()

    def _go_dark(self) -> None:
        self._live = 0
        self._forget()

    async def _watch(self) -> None:
        warned = False
        while True:
            conn = self.client.connection_pool.make_connection()
            try:
                await self._subscribe(conn)
                if warned:
                    log.info("snapshot versions: Redis tracks them again; kept in process")
                warned = False
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, NotTracked):
                    log.info("snapshot versions: %s; every assemble asks Redis", exc)
                    return
                if not (redis_went_away(exc) or isinstance(exc, TimeoutError)):
                    raise
                if not warned:
                    log.warning("snapshot versions: not tracked (%s); every assemble asks Redis meanwhile", exc)
                    warned = True
            finally:
                self._go_dark()
                await conn.disconnect()
            await asyncio.sleep(RECONNECT_AFTER_S)

    async def _subscribe(self, conn: Any) -> None:
        await conn.connect()
        if str(getattr(conn, "protocol", 2)) != "3":
            raise NotTracked("the connection speaks RESP2 (tracking messages need RESP3)")
        # redis-py hands RESP3 invalidation messages to this parser hook (its own client-side
        # cache uses it the same way); a message it gets no handler for is dropped.
        conn._parser.set_invalidation_push_handler(self._pushed)
        await conn.send_command("CLIENT", "SETNAME", self.watch_name)
        with contextlib.suppress(redis.ResponseError):  # named, so CLIENT LIST tells whose it is;
            await conn.read_response()  # a user not allowed CLIENT is refused TRACKING next, and told why
        tracking = ["CLIENT", "TRACKING", "ON", "BCAST"]
        for prefix in Keys(self.settings.key_prefix).version_prefixes(self.settings.shards):
            tracking += ["PREFIX", prefix]
        await conn.send_command(*tracking)
        try:
            reply = await conn.read_response()
        except redis.ResponseError as exc:  # an old Redis, or a user not allowed CLIENT
            raise NotTracked(f"Redis refused CLIENT TRACKING ({exc})") from exc
        if isinstance(reply, Exception):
            raise NotTracked(f"Redis refused CLIENT TRACKING ({reply})")
        self._epochs += 1
        self._live = self._epochs

    async def _pushed(self, message: list[Any]) -> None:
        self.invalidate(message[1] if len(message) > 1 else None)

    async def _listen(self, conn: Any) -> None:
        pinged = False
        while True:
            seen = self._invalidations
            reply = await conn.read_response(timeout=PING_EVERY_S, push_request=True)
            if reply is not None or self._invalidations != seen:  # the ping's answer, or news
                pinged = False
                continue
            if pinged:  # a quiet second after a ping: the link is gone, whatever TCP thinks
                raise TimeoutError("the watch connection stopped answering its pings")
            await conn.send_command("PING")
            pinged = True
