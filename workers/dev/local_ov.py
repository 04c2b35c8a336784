"""Run a real ``openviking-server`` 0.5.2 locally, offline, for tests and the demo.

``write_ov_config`` writes the minimal config (embedding and LLM both pointing at
``workers.dev.model_server``), ``find_openviking_server`` locates the binary, and
``start_local_ov`` starts it in its own process group, waits for ``GET /health``
and returns a handle whose ``stop()`` kills the whole group.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

import httpx

OV_SERVER_ENV = "OVSTREAM_OV_SERVER"
OV_VENV_BINARY = Path("/root/.cache/ovstream/ov-venv/bin/openviking-server")
INSTALL_HINT = (
    "openviking-server 0.5.2 not found. Install it with `scripts/bootstrap.sh openviking`, or by hand:\n"
    "  python3.11 -m venv ~/.cache/ovstream/ov-venv && "
    "~/.cache/ovstream/ov-venv/bin/pip install openviking==0.5.2\n"
    f"or point ${OV_SERVER_ENV} at an openviking-server binary."
)
MODEL_NAME = "ovstream-deterministic"


class LocalOVError(RuntimeError):
    """openviking-server did not start or did not become healthy."""


def write_ov_config(
    workdir: str | os.PathLike[str],
    *,
    ov_port: int,
    model_url: str,
    root_api_key: str | None = None,
    dimension: int = 64,
    host: str = "127.0.0.1",
) -> Path:
    """Write ``workdir/ov.conf`` (JSON) for an offline 0.5.2 server; returns its path.

    ``model_url`` is the model server's OpenAI base URL (ending in ``/v1``).
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    workspace = work / "workspace"
    workspace.mkdir(exist_ok=True)
    server: dict[str, object] = {"host": host, "port": ov_port}
    if root_api_key:
        server["root_api_key"] = root_api_key
    model_url = model_url.rstrip("/")
    config = {
        "server": server,
        "storage": {
            "workspace": str(workspace),
            "vectordb": {"name": "context", "backend": "local"},
            "agfs": {"backend": "local"},
        },
        "embedding": {
            "dense": {
                "provider": "openai",
                "model": MODEL_NAME,
                "api_base": model_url,
                "api_key": "x",
                "dimension": dimension,
                "input": "text",
            }
        },
        "vlm": {
            "provider": "openai",
            "model": MODEL_NAME,
            "api_base": model_url,
            "api_key": "x",
            "temperature": 0.0,
            "max_retries": 0,
        },
    }
    path = work / "ov.conf"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def find_openviking_server() -> str | None:
    """``$OVSTREAM_OV_SERVER``, then PATH, then the ov-venv under /root, then under ``~``."""
    env = os.environ.get(OV_SERVER_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("openviking-server")
    if found:
        return found
    for candidate in (OV_VENV_BINARY, Path.home() / ".cache/ovstream/ov-venv/bin/openviking-server"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _tail(path: Path, n: int = 40) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=n))
    except OSError:
        return "(no log)"


class LocalOV:
    """A running openviking-server: ``.url``, ``.pid``, ``.log_path``, ``.stop()``."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        workdir: Path,
        log_path: Path,
        config_path: Path,
        root_api_key: str | None,
        startup_s: float,
    ) -> None:
        self.proc = proc
        self.url = url
        self.workdir = workdir
        self.log_path = log_path
        self.config_path = config_path
        self.root_api_key = root_api_key
        self.startup_s = startup_s

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        return _tail(self.log_path, n)

    def rss_bytes(self) -> int | None:
        """Resident memory of the server process (Linux /proc), or None."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers, and reap the leader."""
        _kill_group(self.proc, timeout_s)

    def __enter__(self) -> LocalOV:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    pgid = proc.pid  # start_new_session=True makes the leader's pid the pgid
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid):
                return
            time.sleep(0.05)
    proc.wait(timeout=5)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path, deadline: float, timeout_s: float) -> None:
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            if proc.poll() is not None:
                raise LocalOVError(
                    f"openviking-server exited with {proc.returncode}; last lines of {log_path}:\n{_tail(log_path)}"
                )
            try:
                r = client.get(f"{url}/health")
                if r.status_code == 200 and r.json().get("status") in ("ok", "healthy"):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise LocalOVError(
                    f"openviking-server not healthy after {timeout_s:.0f}s; "
                    f"last lines of {log_path}:\n{_tail(log_path)}"
                )
            time.sleep(0.2)


def start_local_ov(
    workdir: str | os.PathLike[str],
    *,
    port: int,
    model_url: str,
    root_api_key: str | None = None,
    timeout_s: float = 90.0,
    dimension: int = 64,
    binary: str | None = None,
) -> LocalOV:
    """Start openviking-server on ``127.0.0.1:port`` and wait until ``/health`` is ok.

    Logs go to ``workdir/ov.log``. Raises ``LocalOVError`` (with the last 40 log
    lines) if the binary is missing, exits early or is not healthy in time.
    """
    exe = binary or find_openviking_server()
    if exe is None:
        raise LocalOVError(INSTALL_HINT)
    work = Path(workdir)
    config_path = write_ov_config(
        work, ov_port=port, model_url=model_url, root_api_key=root_api_key, dimension=dimension
    )
    log_path = work / "ov.log"
    env = dict(os.environ)
    env["OPENVIKING_CONFIG_FILE"] = str(config_path)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Everything is loopback: keep proxies and hub downloads out of the way.
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["HF_HUB_OFFLINE"] = "1"
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            [exe, "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)],
            cwd=str(work),
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        _wait_healthy(proc, url, log_path, started + timeout_s, timeout_s)
    except BaseException:
        # Also on Ctrl-C: the server runs in its own session, so nothing else would stop it.
        _kill_group(proc, 5.0)
        raise
    return LocalOV(proc, url, work, log_path, config_path, root_api_key, time.monotonic() - started)
