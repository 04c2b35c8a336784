"""``ovstream demo`` against a real openviking-server 0.5.2 it starts itself (the ``./run`` path).

The configured OV and Redis URLs point at free ports, so the demo has to start
the bundled model server, a local openviking-server and (when installed) a
redis-server, and stop them all again. The timeout only bounds a hang.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from workers.dev.local_redis import free_port

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 420


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_starts_real_ov_replays_and_stops_everything(ov_binary: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVSTREAM_")}  # KEEP_OV_WORKDIR too
    env.update(
        {
            "OVSTREAM_OV_SERVER": ov_binary,
            "OVSTREAM_BASE_URL": f"http://127.0.0.1:{free_port()}",
            "OVSTREAM_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        }
    )
    result = subprocess.run(
        [sys.executable, "-m", "workers.cli", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    out = result.stdout
    assert result.returncode == 0, f"{out[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"

    ov = re.search(r"local openviking-server pid (\d+) at (\S+)", out)
    assert ov, out
    assert "OV: in-memory FakeOV" not in out
    # phase 2 ran on the real server: working memory became the session summary
    main = out.split("== main assemble of session", 1)[1].split("\n== ", 1)[0]
    assert "[Session History Summary]" in main and "# Working Memory" in main
    assert "## Session Context Guide" in main
    # memories were extracted and recalled in a new session
    recall = out.split("== auto-recall assemble in a NEW session", 1)[1].split("\n== ", 1)[0]
    assert "<relevant-memories>" in recall and "viking://user/default/memories/" in recall
    table = out.split("== recorded commit outcomes", 1)[1]
    assert re.search(r"commit_\S+\s+threshold\s+completed", table), table

    assert not _alive(int(ov.group(1))), "openviking-server left running"
    redis_pid = re.search(r"started redis-server pid (\d+)", out)
    if redis_pid:
        assert not _alive(int(redis_pid.group(1))), "redis-server left running"
    workdir = re.search(r"openviking-server \(\S+\) in (\S+) \(", out)
    assert workdir and not Path(workdir.group(1)).exists(), "the OV workdir was not removed"
