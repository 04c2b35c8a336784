"""A TCP proxy in front of a redis-server that drops one reply: the first reply of the kind
asked for to a command carrying a marker (a script's SHA-1) is never forwarded, and the
client's connection is closed instead, after Redis ran the command. What a client sees when a
failover or a network blip loses a reply; a client that retries blindly (redis-py's cluster
client) then runs the command again."""

from __future__ import annotations

import asyncio
import contextlib


class ReplyDropper:
    def __init__(self, target_port: int, marker: bytes, reply_prefix: bytes) -> None:
        self.target_port = target_port
        self.marker = marker
        self.reply_prefix = reply_prefix
        self.dropped = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> ReplyDropper:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers |= {writer, up_writer}
        armed = False

        async def upstream() -> None:
            nonlocal armed
            while data := await reader.read(65536):
                if not self.dropped and self.marker in data:
                    armed = True
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            nonlocal armed
            while data := await up_reader.read(65536):
                if armed and not self.dropped:
                    armed = False
                    if data.startswith(self.reply_prefix):
                        self.dropped += 1  # Redis ran it; the client never hears so
                        return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()
                self._writers.discard(w)
