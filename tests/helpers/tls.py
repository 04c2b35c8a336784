"""TLS for the deployment tests: a private CA (trustme), a redis-server serving only TLS
(Debian's is built with it), and a TLS endpoint in front of a plain server (OV).

Everything listens on loopback ports and is stopped by PID (redis) or by closing its
loop (the proxy)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis
import trustme

from workers.dev.local_redis import RedisServer, free_port

START_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Pki:
    """A private CA, a server certificate for 127.0.0.1 / localhost, and a client certificate."""

    ca_file: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_pki(directory: Path) -> Pki:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("ovstream-client@example.org")
    files = {
        "ca.pem": ca.cert_pem,
        "server.pem": server.cert_chain_pems[0],
        "server.key": server.private_key_pem,
        "client.pem": client.cert_chain_pems[0],
        "client.key": client.private_key_pem,
    }
    for name, blob in files.items():
        blob.write_to_path(str(directory / name))
    return Pki(*(str(directory / name) for name in files))


class TlsRedis:
    """``redis-server`` on a TLS-only loopback port that requires client certificates."""

    def __init__(self, pki: Pki, *, durable: bool = False) -> None:
        self.pki = pki
        self.port = free_port()
        self.workdir = tempfile.mkdtemp(prefix="ovstream-tls-redis-")
        self.url = f"rediss://127.0.0.1:{self.port}/0"
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port", "0",
                "--tls-port", str(self.port),
                "--bind", "127.0.0.1",
                "--tls-cert-file", pki.server_cert,
                "--tls-key-file", pki.server_key,
                "--tls-ca-cert-file", pki.ca_file,
                "--tls-auth-clients", "yes",
                "--save", "",
                *persistence,
                "--dir", self.workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"TLS redis-server on {self.port} did not answer (exit {self.proc.returncode})")
            time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(
            self.url,
            ssl_ca_certs=self.pki.ca_file,
            ssl_certfile=self.pki.client_cert,
            ssl_keyfile=self.pki.client_key,
            ssl_cert_reqs="required",
        )

    def _answers(self) -> bool:
        try:
            client = self.client()
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError):
            return False

    def stop(self) -> None:
        RedisServer(self.proc, self.url, self.workdir).stop()


class TlsProxy:
    """An HTTPS endpoint (the PKI's server certificate) forwarding bytes to ``target_port``
    on loopback: OV behind TLS, as a reverse proxy puts it."""

    def __init__(self, pki: Pki, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(pki.server_cert, pki.server_key)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise RuntimeError("TLS proxy did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self._context)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
