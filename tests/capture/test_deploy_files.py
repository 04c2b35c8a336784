"""deploy/: the systemd units and the compose file run what the Procfile runs, with the
declared environment, stop on SIGTERM and are probed for health. Each declared command is
run here with the declared environment (pointed at the test's Redis and OV) until the probe
the file declares for it passes, then stopped with the signal the file declares."""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from core.config_load import load_settings
from tests.helpers.e2e import ovstream_command, unique
from tests.helpers.waiting import wait_until
from workers.dev.local_redis import free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ROLES = {"rpc", "capture", "worker"}
UNITS = {"rpc": "ovstream-rpc.service", "capture": "ovstream-capture@.service", "worker": "ovstream-worker@.service"}


def _procfile_roles() -> set[str]:
    lines = (DEPLOY.parent / "Procfile").read_text().splitlines()
    return {line.split(":", 1)[1].split()[-1] for line in lines if line.strip()}


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / name)
    return parser


def _env_file() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (DEPLOY / "ovstream.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def test_the_units_and_the_compose_file_run_the_procfile() -> None:
    assert _procfile_roles() == ROLES
    for role, name in UNITS.items():
        service = _unit(name)["Service"]
        assert shlex.split(service["ExecStart"])[-1] == role
        assert service["EnvironmentFile"] == "/etc/ovstream/ovstream.env"
        assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "on-failure"
    compose = _compose()["services"]
    for role in ROLES:
        assert compose[role]["command"] == [role] and compose[role]["env_file"] == "ovstream.env"
        assert compose[role]["stop_signal"] == "SIGTERM"
    assert "--appendonly" in compose["redis"]["command"]  # the backlog survives a Redis restart


def test_every_process_has_a_probe() -> None:
    compose = _compose()["services"]
    for role in ("capture", "worker"):
        assert compose[role]["healthcheck"]["test"] == ["CMD", "ovstream", "health", "--role", role]
        probe = _unit("ovstream-health@.service")["Service"]["ExecStart"].replace("%i", role)
        assert f"ovstream health --role {role}" in probe and f"ovstream-{role}@" in probe
    assert "/healthz" in " ".join(compose["rpc"]["healthcheck"]["test"])
    assert _unit("ovstream-health@.timer")["Timer"]["OnUnitActiveSec"]


def test_the_environment_file_is_valid_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env_file()
    assert all(key.startswith("OVSTREAM_") for key in env)
    token = tmp_path / "rpc-token"
    token.write_text("a-token-for-the-env-file-test\n")
    env["OVSTREAM_RPC_TOKEN_FILE"] = str(token)
    for key in [k for k in os.environ if k.startswith("OVSTREAM_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.rpc_host == "0.0.0.0" and settings.credentials and settings.log_format == "json"


@dataclass
class Declared:
    """One process as the deploy files declare it, run locally."""

    role: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path

    def probe(self) -> bool:
        if self.role == "rpc":
            try:
                return httpx.get(f"http://127.0.0.1:{self.env['OVSTREAM_RPC_PORT']}/healthz", timeout=2).is_success
            except httpx.HTTPError:
                return False
        test = _compose()["services"][self.role]["healthcheck"]["test"][1:]  # ["ovstream", "health", ...]
        command = [*ovstream_command(), *test[1:]]
        return subprocess.run(command, env=self.env, capture_output=True, timeout=30).returncode == 0


@pytest.fixture
def declared(redis_url: str, fake_ov_url: str, tmp_path: Path) -> Iterator[list[Declared]]:
    token = tmp_path / "rpc-token"
    token.write_text("a-token-for-the-deploy-test\n")
    overrides = {
        "OVSTREAM_REDIS_URL": redis_url,
        "OVSTREAM_BASE_URL": fake_ov_url,
        "OVSTREAM_RPC_PORT": str(free_port()),
        "OVSTREAM_RPC_TOKEN_FILE": str(token),
        "OVSTREAM_KEY_PREFIX": unique("deploy"),
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}
    env = {**base, **_env_file(), **overrides}
    started: list[Declared] = []
    for role in ("capture", "worker", "rpc"):
        argv = shlex.split(_unit(UNITS[role])["Service"]["ExecStart"])
        log = tmp_path / f"{role}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*ovstream_command(), *argv[1:]], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        started.append(Declared(role, env, proc, log))
    try:
        yield started
    finally:
        for item in started:
            if item.proc.poll() is None:
                os.killpg(item.proc.pid, signal.SIGKILL)
                item.proc.wait(timeout=10)


def test_the_declared_processes_pass_their_probes_and_stop_on_sigterm(declared: list[Declared]) -> None:
    for item in declared:
        wait_until(item.probe, f"{item.role} passing its probe", timeout_s=60, interval_s=0.5)
    for item in declared:
        timeout = int(_unit(UNITS[item.role])["Service"]["TimeoutStopSec"])
        os.killpg(item.proc.pid, signal.SIGTERM)
        assert item.proc.wait(timeout=timeout) == 0, item.log.read_text()
        assert "Traceback" not in item.log.read_text()
    capture = next(item for item in declared if item.role == "capture")
    assert not capture.probe()  # stopped cleanly: its record is gone, the probe says so


def _readme_block(title: str) -> str:
    """The first ```sh block under the deploy/README.md heading ``## <title>``."""
    section = (DEPLOY / "README.md").read_text().split(f"\n## {title}\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_after_the_readme_steps_everything_the_compose_file_names_exists(tmp_path: Path) -> None:
    deploy = tmp_path / "repo" / "deploy"
    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("secrets", "ov.conf"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(DEPLOY.parent / name, deploy.parent / name)
    steps = _readme_block("compose")
    subprocess.run(["bash", "-euo", "pipefail", "-c", steps], cwd=deploy.parent, check=True, timeout=60)
    compose = yaml.safe_load((deploy / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        if "build" in service:
            context = deploy / service["build"]["context"]
            assert (context / service["build"]["dockerfile"]).is_file(), name
        if "env_file" in service:
            assert (deploy / service["env_file"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (deploy / source).exists(), (name, volume)
            else:
                assert source in compose["volumes"], (name, volume)
        for secret in service.get("secrets", []):
            assert secret in compose["secrets"], (name, secret)
    for name, secret in compose["secrets"].items():
        assert (deploy / secret["file"]).read_text().strip(), name  # made by the steps, not empty
    # OV on every interface, in API-key mode with the secret as its root key (dev mode is loopback only)
    ov_start = importlib.util.spec_from_file_location("ov_start", deploy / "ov_start.py")
    assert ov_start is not None and ov_start.loader is not None
    module = importlib.util.module_from_spec(ov_start)
    ov_start.loader.exec_module(module)
    config = json.loads((deploy / "openviking" / "ov.conf").read_text())
    root_key = (deploy / "secrets" / "ov-root-key").read_text().strip()
    server = module.compose_config(config, root_key)["server"]
    assert server == {"host": "0.0.0.0", "port": 1933, "root_api_key": root_key}
    assert {"embedding", "vlm", "storage"} <= set(config)
    # the processes read the key ov-init writes, and start after it
    anchor = compose["services"]["rpc"]
    key_file = anchor["environment"]["OVSTREAM_API_KEY_FILE"]
    assert key_file in " ".join(compose["services"]["ov-init"]["command"])
    assert anchor["depends_on"]["ov-init"]["condition"] == "service_completed_successfully"
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        done = subprocess.run(
            ["docker", "compose", "-f", str(deploy / "compose.yaml"), "config", "-q"], capture_output=True
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_verifies_the_units(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on each unit, ``/usr/local/bin/ovstream`` pointed at this
    checkout's (the install step puts it there); its user comes from ovstream.sysusers."""
    binary = ovstream_command()[0]
    for unit in sorted((DEPLOY / "systemd").glob("ovstream*.*")):
        if unit.suffix not in (".service", ".timer"):
            continue
        (tmp_path / unit.name).write_text(unit.read_text().replace("/usr/local/bin/ovstream", binary))
    units = sorted(str(p) for p in tmp_path.iterdir())
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    users = (DEPLOY / "systemd" / "ovstream.sysusers").read_text()
    assert any(line.split()[:2] == ["u", "ovstream"] for line in users.splitlines())
    assert "systemd-sysusers" in _readme_block("systemd")
