"""deploy/k8s/ovstream.yaml and deploy/Dockerfile run as an operator runs them, as far as this
machine allows (tests/helpers/pod.py): each Deployment's container with its args, as the
pod's numeric uid and gid, on a read-only root filesystem with /tmp an emptyDir, the
manifest's environment (its ConfigMap) and its Secret's files where the manifest mounts them;
each probe run the way the kubelet runs it. With Redis and OV away no liveness probe fails
(a restart never brings a dependency back) while readiness does; once they are back the
pods are ready again, having never restarted.

Real redis-server (durable, restarted), the FakeOV over HTTP in API-key mode (its key read
from the Secret's file).
"""

from __future__ import annotations

import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from core.config import Settings
from tests.helpers.capture import turn
from tests.helpers.fake_ov_process import ov_answers, spawn_fake_ov
from tests.helpers.pod import Pod
from tests.helpers.waiting import wait_until
from workers.dev.local_redis import free_port, start_redis_server
from workers.store.streams import publish_turn

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s" / "ovstream.yaml"
OV_KEY = "ov-user-key-of-the-pods-0123"
RPC_TOKEN = "rpc-token-of-the-pods-0123456"

pytestmark = pytest.mark.skipif(
    not (shutil.which("unshare") and shutil.which("setpriv") and shutil.which("nsenter")),
    reason="needs util-linux's unshare, setpriv and nsenter (and root)",
)


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(K8S.read_text()) if d]


def _deployments() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _documents() if d["kind"] == "Deployment"}


def test_the_image_runs_as_the_numeric_user_the_pods_ask_for() -> None:
    user = re.findall(r"^USER\s+(\S+)", (ROOT / "deploy" / "Dockerfile").read_text(), re.MULTILINE)
    assert len(user) == 1 and re.fullmatch(r"\d+:\d+", user[0]), user  # runAsNonRoot can verify it
    uid, gid = (int(x) for x in user[0].split(":"))
    assert uid != 0
    for name, deployment in _deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True and (security["runAsUser"], security["runAsGroup"]) == (uid, gid), name
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], name  # the liveness beat's directory


def _pod(name: str, env: dict[str, str], secrets: Path, workdir: Path) -> Pod:
    deployment = _deployments()[name]
    spec = deployment["spec"]["template"]["spec"]
    [container] = spec["containers"]
    secret_volume = next(v["name"] for v in spec["volumes"] if "secret" in v)
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == secret_volume)
    return Pod(name, container, spec["securityContext"], env, secrets, mount, workdir / f"{name}.log")


def _answers_tcp(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _healthz(port: int) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=3).status_code
    except httpx.HTTPError:
        return 0


def test_the_pods_start_serve_and_ride_out_a_redis_and_ov_outage(tmp_path: Path) -> None:
    config = next(d for d in _documents() if d["kind"] == "ConfigMap")["data"]
    server = start_redis_server(durable=True)
    ov_port, rpc_port = free_port(), free_port()
    ov_url = f"http://127.0.0.1:{ov_port}"
    ov = spawn_fake_ov(ov_port, tmp_path, "--api-key", f"{OV_KEY}=acme:pods")
    secrets = tmp_path / "secret"
    secrets.mkdir(mode=0o755)
    for key, value in {"ov-key": OV_KEY, "rpc-token": RPC_TOKEN}.items():
        (secrets / key).write_text(value)
        (secrets / key).chmod(0o644)  # the kubelet's default mode; fsGroup owns them there
    # the manifest's ConfigMap, pointed at this machine's Redis and OV (and a free RPC port)
    env = {**config, "OVSTREAM_BASE_URL": ov_url, "OVSTREAM_REDIS_URL": server.url, "OVSTREAM_RPC_PORT": str(rpc_port)}
    pods = [_pod(name, env, secrets, tmp_path) for name in ("ovstream-rpc", "ovstream-capture", "ovstream-worker")]
    _, capture, worker = pods
    try:
        wait_until(lambda: ov_answers(ov_url), "the fake OV answering")
        for pod in pods:
            pod.start()
        for pod in (capture, worker):
            for probe in ("startupProbe", "readinessProbe"):
                wait_until(lambda p=pod, k=probe: p.probe(k)[0] == 0, f"{pod.name} {probe}", timeout_s=60, interval_s=1)
        wait_until(lambda: _healthz(rpc_port) == 200, "the RPC ready (/healthz)", timeout_s=60)
        assert all(pod.root_is_read_only() for pod in pods)  # readOnlyRootFilesystem, as the kubelet sets it

        # it works as deployed: a turn reaches OV under the key read from the Secret's file
        settings = Settings(redis_url=server.url, shards=int(config["OVSTREAM_SHARDS"]))
        publish_turn_client = redis.Redis.from_url(server.url)
        publish_turn(publish_turn_client, settings, turn("pod-session", 0))
        with httpx.Client(base_url=ov_url, headers={"X-API-Key": OV_KEY}, timeout=10) as ov_http:
            wait_until(
                lambda: ov_http.get("/api/v1/sessions/pod-session").status_code == 200, "the turn in OV", timeout_s=60
            )
        publish_turn_client.close()

        # Redis and OV away: nothing is stuck, so no liveness probe fails; readiness does
        server.kill()
        ov.terminate()
        ov.wait(timeout=10)
        time.sleep(5)
        for pod in (capture, worker):
            code, said = pod.probe("livenessProbe")
            assert code == 0, (pod.name, said)
            code, said = pod.probe("readinessProbe")
            assert code == 1 and "Redis unreachable" in said, (pod.name, said)
        assert _answers_tcp(rpc_port)  # the RPC's liveness: its socket answers
        assert _healthz(rpc_port) == 503  # its readiness: not without Redis

        server.restart()
        ov = spawn_fake_ov(ov_port, tmp_path, "--api-key", f"{OV_KEY}=acme:pods")
        wait_until(lambda: ov_answers(ov_url), "the fake OV answering again")
        for pod in (capture, worker):
            wait_until(lambda p=pod: p.probe("readinessProbe")[0] == 0, f"{pod.name} ready again", timeout_s=60)
        wait_until(lambda: _healthz(rpc_port) == 200, "the RPC ready again", timeout_s=60)
        for pod in pods:  # never restarted, never wrote where it may not
            assert pod.proc is not None and pod.proc.poll() is None, (pod.name, pod.log()[-3000:])
            assert "Read-only file system" not in pod.log() and "Traceback" not in pod.log(), pod.log()[-3000:]
    finally:
        codes = {pod.name: pod.stop() for pod in pods}
        ov.terminate()
        ov.wait(timeout=10)
        server.stop()
    assert codes == {pod.name: 0 for pod in pods}, codes  # SIGTERM: each stops cleanly
