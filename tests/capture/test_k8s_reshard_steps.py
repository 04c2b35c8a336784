"""deploy/k8s/README.md's reshard step, followed as written against real processes: the command
it gives (run as the pod would, without ``kubectl exec``), then the pods rolled with the
ConfigMap as it says (unchanged): capture starts again and every turn is applied once, in
order. And the count an operator would naturally write after it (the new one) is refused at
start with what to set, not crash-looped on a message that contradicts the docs.

Real processes, a real redis-server, the FakeOV over HTTP.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path

import redis

from tests.helpers.chaos import Deployment, Ledger, Load, expected_ids
from tests.helpers.e2e import ovstream_command, settings_env, unique
from tests.helpers.waiting import wait_until
from workers.store.shard_map import read_shard_map

ROOT = Path(__file__).resolve().parents[2]
K8S_README = ROOT / "deploy" / "k8s" / "README.md"


def _reshard_section() -> str:
    text = K8S_README.read_text()
    start = text.index("## 7. Reshard")
    return text[start : text.index("\n## ", start + 1)]


def _readme_command() -> list[str]:
    """The command the README's reshard section runs in a pod."""
    block = re.search(r"```sh\n(.+?)\n```", _reshard_section(), re.S)
    assert block is not None, _reshard_section()
    argv = shlex.split(block.group(1))
    return argv[argv.index("--") + 1 :] if "--" in argv else argv


def test_the_k8s_readme_asks_for_no_configmap_change_the_processes_refuse() -> None:
    section = _reshard_section()
    assert not re.search(r"OVSTREAM_SHARDS:\s*\"\d+\"", section), section  # no new count to set


def test_the_k8s_readme_reshard_steps_keep_capture_running(redis_url: str, fake_ov_url: str, tmp_path: Path) -> None:
    values = {
        "base_url": fake_ov_url,
        "redis_url": redis_url,
        "key_prefix": unique("k8s"),
        "shards": 4,
        "capture_block_ms": 100,
    }
    deploy = Deployment(values, tmp_path)
    sessions = [f"k8s{i}" for i in range(6)]
    ledger = Ledger(deploy.settings, fake_ov_url, sessions)
    client = redis.Redis.from_url(redis_url)
    try:
        deploy.start("capture")
        load = Load(deploy.settings, sessions, rate=30).start()
        time.sleep(1.0)
        command = _readme_command()
        assert command[:2] == ["ovstream", "reshard"], command
        done = subprocess.run(
            [*ovstream_command(), *command[1:]],
            env=deploy.env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done
        shards = read_shard_map(client, deploy.settings)
        assert shards.shards == int(command[command.index("--shards") + 1]) and shards.generation == 1, shards
        deploy.restart("capture")  # the rollout, with the ConfigMap as the README leaves it
        wait_until(lambda: "capture worker" in deploy.log("capture", 1000), "capture started again", timeout_s=60)
        time.sleep(1.0)
        turns = load.finish(timeout_s=30)
        # (the load's stream marks name the first generation's streams: OV is the ledger here)
        applied = lambda: all(ledger.ov_ids(s) == expected_ids(s, turns) for s in sessions)  # noqa: E731
        wait_until(applied, "every turn applied once, in order", timeout_s=90)
        assert "capture" not in deploy.exited(), deploy.log("capture")

        # What an operator would write after the reshard: refused with what to set, exit 2.
        env = settings_env({**values, "shards": shards.shards})
        wrong = subprocess.run(
            [*ovstream_command(), "capture"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert wrong.returncode == 2, wrong
        assert "set shards back to 4" in wrong.stderr and "Traceback" not in wrong.stderr, wrong.stderr
    finally:
        ledger.close()
        client.close()
        deploy.stop()
