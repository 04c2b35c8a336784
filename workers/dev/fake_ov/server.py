"""``ovstream fake-ov``: the in-memory OpenViking fake served over real HTTP.

For tests and demos whose other processes (``ovstream up``, the TypeScript
plugin's integration test) need an OV they can reach by URL and whose state
the test can read back through the OV routes themselves
(``GET /api/v1/sessions/{id}/context``). It is ``workers.dev.fake_ov.app.FakeOV``'s
``asgi_app()`` under uvicorn: same routes, envelope and error codes; state
lives as long as the process. Point the service at it with
``OVSTREAM_BASE_URL=http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import logging
from urllib.parse import urlsplit

import uvicorn

from core.config import Settings
from workers.dev.fake_ov.app import FakeOV

log = logging.getLogger(__name__)


def _default_port(settings: Settings) -> int:
    """The port of ``settings.base_url`` (where the service will look for OV), else 1933."""
    try:
        return urlsplit(settings.base_url).port or 1933
    except ValueError:
        return 1933


def add_fake_ov_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="listen port (default: the port of baseUrl, else 1933; 0 picks a free one)",
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="added to every call: an OV under load (benchmarks)"
    )
    parser.add_argument(
        "--route-latency-ms",
        action="append",
        default=[],
        metavar="ROUTE=MS[-MS]",
        help="added to the calls of one route (e.g. add_messages=1000-2000: each write answers after 1-2 s)",
    )
    parser.add_argument(
        "--log-writes", action="store_true", help="log each message write (session, first words, total): tests"
    )
    parser.add_argument(
        "--phase2-reads",
        type=int,
        default=0,
        help="task reads answering 'running' before a commit's phase 2 ends: a slow phase 2 (benchmarks)",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY=ACCOUNT:USER",
        help="serve in API-key mode with this user key (repeatable); default: dev mode",
    )


def _api_keys(specs: list[str]) -> dict[str, tuple[str, str]]:
    keys: dict[str, tuple[str, str]] = {}
    for spec in specs:
        key, sep, who = spec.partition("=")
        account, sep2, user = who.partition(":")
        if not (sep and sep2 and key and account and user):
            raise SystemExit(f"ovstream fake-ov: --api-key wants KEY=ACCOUNT:USER, got {spec!r}")
        keys[key] = (account, user)
    return keys


def _route_latencies(specs: list[str]) -> dict[str, float | tuple[float, float]]:
    latencies: dict[str, float | tuple[float, float]] = {}
    for spec in specs:
        route, sep, ms = spec.partition("=")
        low, _, high = ms.partition("-")
        try:
            latencies[route] = (float(low) / 1000, float(high) / 1000) if high else float(low) / 1000
        except ValueError:
            raise SystemExit(
                f"ovstream fake-ov: --route-latency-ms wants ROUTE=MS or ROUTE=MS-MS, got {spec!r}"
            ) from None
        if not (sep and route):
            raise SystemExit(f"ovstream fake-ov: --route-latency-ms wants ROUTE=MS or ROUTE=MS-MS, got {spec!r}")
    return latencies


def cli_fake_ov(settings: Settings, args: argparse.Namespace) -> int:
    host = args.host
    port = _default_port(settings) if args.port is None else args.port
    fake = FakeOV(api_keys=_api_keys(args.api_key) or None)
    fake.latency_s = _route_latencies(args.route_latency_ms) or args.latency_ms / 1000
    fake.phase2_reads_until_done = args.phase2_reads
    fake.log_writes = args.log_writes
    log.info("fake OV %s on http://%s:%s (%s mode)", "0.5.2", host, port, "api-key" if fake.auth_enabled else "dev")
    uvicorn.run(fake.asgi_app(), host=host, port=port, log_config=None, access_log=False)
    return 0
