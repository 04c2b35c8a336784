"""Redis over TLS set up wrong is a configuration error, not an outage.

A connection that fails because this process does not trust the server's certificate, because
the server wants a client certificate it was not given, or because ``redis://`` was pointed at
a port that speaks TLS, fails the same way on every try: waiting for it as for a restart would
only hide it in a warning. ``tls_problem`` names the setting to change.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from urllib.parse import urlsplit

from core.config import Settings

PROBE_TIMEOUT_S = 2.0


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def tls_problem(exc: BaseException, settings: Settings, url: str) -> str | None:
    """What in the TLS settings makes every connection to ``url`` fail as ``exc`` did (the
    message names the setting), or None when ``exc`` says nothing of TLS."""
    where = settings.redacted_redis_url(url)
    chain = _chain(exc)
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return (
            f"redis_ca_file (redisCaFile): the certificate of Redis at {where} is not trusted ({chain[-1]}); "
            "set it to the CA that signed the server's certificate"
        )
    if any(isinstance(e, ssl.SSLError) for e in chain):
        given = "the one in redis_cert_file was refused" if settings.redis_cert_file else "none is set"
        return (
            f"redis_cert_file / redis_key_file (redisCertFile / redisKeyFile): Redis at {where} ended the TLS "
            f"handshake ({chain[-1]}); it requires a client certificate and {given}"
        )
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    closed = any("closed by the server" in str(e).lower() for e in chain)  # the asyncio client's words
    if parts.scheme == "rediss" and closed and not settings.redis_cert_file and ends_plain_session(host, port):
        return (
            f"redis_cert_file / redis_key_file (redisCertFile / redisKeyFile): Redis at {where} closes a TLS "
            "connection without a client certificate; it requires one and none is set"
        )
    reset = parts.scheme == "redis" and any(isinstance(e, ConnectionResetError) for e in chain)
    if reset and speaks_tls(host, port):
        return f"redis_url: Redis at {where} speaks TLS; use rediss:// (and redisCaFile for a private CA)"
    return None


def _unchecked() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def ends_plain_session(host: str, port: int) -> bool:
    """Whether ``host:port`` ends a TLS session that brings no client certificate before it
    answers a PING (a server that accepted it answers, +PONG or -NOAUTH alike)."""
    try:
        with (
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw,
            _unchecked().wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(b"PING\r\n")
            return tls.recv(64) == b""
    except ssl.SSLError:
        return True
    except OSError:
        return False


def speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificate not checked: only the
    protocol is asked about)."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as raw:
        try:
            with _unchecked().wrap_socket(raw, server_hostname=host):
                return True
        except ssl.SSLError as exc:  # a TLS peer refusing the handshake speaks TLS; plain bytes do not
            return "WRONG_VERSION_NUMBER" not in str(exc)
    return False
