"""Redis over TLS set up wrong: the processes refuse at start, naming the setting, exit 2 (a
restart would not fix it), where an outage is waited out. A real TLS-only redis-server that
requires client certificates (tests/helpers/tls.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.e2e import ovstream_command, settings_env
from tests.helpers.tls import Pki, TlsRedis

REFUSED_WITHIN_S = 120
"""A safety net only: a process that waits as for an outage never exits by itself."""


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("no CA for the private CA's certificate", "redis_ca_file (redisCaFile)"),
        ("no client certificate where one is required", "redis_cert_file / redis_key_file"),
        ("redis:// to the TLS port", "speaks TLS; use rediss://"),
    ],
)
@pytest.mark.parametrize("command", ["capture", "worker"])
def test_tls_set_up_wrong_is_refused_at_start_naming_the_setting(
    tls_redis: TlsRedis, pki: Pki, tmp_path: Path, command: str, case: str, named: str
) -> None:
    values: dict[str, str] = {"redis_url": tls_redis.url, "base_url": "http://127.0.0.1:1"}
    if case.startswith("no client"):
        values["redis_ca_file"] = pki.ca_file
    elif case.startswith("redis://"):
        values["redis_url"] = tls_redis.url.replace("rediss://", "redis://")
    done = subprocess.run(
        [*ovstream_command(), command],
        env=settings_env(values),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=REFUSED_WITHIN_S,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert named in said and "waiting for Redis" not in said, said[-3000:]
    assert "Traceback" not in said
    assert "could not unregister" not in said  # it never registered
