"""What the safety net for lost extractions costs, and whether it still catches every loss, on
the real openviking-server 0.5.2 and the dev model server.

Prints figures; not a test. Starts a redis-server, the bundled model server and a local
openviking-server on free loopback ports, and runs ovstream's commit jobs in this process (an
RQ worker on a thread). Each scenario is one OV user with ``--sessions`` sessions side by side
(the mix of a real user: most conversations hold nothing worth remembering, ``--memorable`` of
them a preference each round), committed together ``--rounds`` times:

- merge works (the model's ``normal`` mode): every quiet commit that overlapped another of its
  user is a suspect; the extra phase 2s are the repair commits started (each one more phase 2,
  a model call), as a share of the commits;
- merge dropped (``drop-merge``: the model answers OV's merge prompt with ``sdk.commit()``):
  every memorable commit loses its memory; each must be written by a repair.

Both with the default ``extractionRepairsPerHour``; each figure is read once the run's repairs
settled, then again "an hour on": the budget's window passed (its record of starts deleted),
the suspects still waiting are repaired. The extraction calls the model answered are counted
from its own tally (``GET /admin/stats``): commits plus repairs.

    .venv/bin/python bench/repair_cost.py [--sessions 20] [--rounds 5] [--memorable 3]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import redis  # noqa: E402

from bench.commits_one_user import ask, wait_final  # noqa: E402
from core.config import Settings  # noqa: E402
from workers.commits.context import context_of  # noqa: E402
from workers.commits.repair import read_lost_extractions  # noqa: E402
from workers.commits.repair_pool import schedule_repair, waiting_suspects  # noqa: E402
from workers.commits.worker import drain_jobs  # noqa: E402
from workers.dev.demo_services import start_local_stack_with_model  # noqa: E402
from workers.dev.local_redis import start_redis_server  # noqa: E402
from workers.dev.model_server import ModelServerHandle  # noqa: E402
from workers.store.keys import Keys  # noqa: E402

QUIET = [
    "Please list the files in the build directory and tell me which one is the largest.",
    "Can you check whether the tests pass on the release branch before the meeting?",
    "Summarise what the last three commits on the main branch changed, in plain words.",
    "Rename the helper function in the parser module and update every place that calls it.",
    "What does the error in the deployment log mean, and where does it come from?",
]
SETTLE_S = 30.0
"""How long nothing may change (repairs, verdicts, suspects waiting) before a scenario's figures
are read: a repair waits 5 s for its user's other suspects, and for its user's commits."""
SETTLE_MAX_S = 900.0


def turn(ov: httpx.Client, sid: str, text: str) -> None:
    messages = [
        {"role": "user", "parts": [{"type": "text", "text": text}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "Done."}]},
    ]
    ov.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": messages}).raise_for_status()


def settled(redis_client, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Until the repairs and their verdicts stop changing for ``SETTLE_S``."""
    last, since, deadline = None, time.monotonic(), time.monotonic() + SETTLE_MAX_S
    while time.monotonic() < deadline:
        lost = read_lost_extractions(redis_client, settings, newest=0)
        now = (lost.lost_total, lost.repairs_started, lost.suspects_waiting, tuple(sorted(lost.repairs.items())))
        unfinished = any(state in ("pending", "running") for state in lost.repairs)
        if now != last or unfinished:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE_S:
            return
        time.sleep(1.0)


def scenario(
    name: str, mode: str, ov_url: str, model: ModelServerHandle, redis_url: str, args: argparse.Namespace
) -> dict[str, object]:
    user = f"bench-{name}-{uuid.uuid4().hex[:6]}"
    settings = Settings(
        base_url=ov_url,
        redis_url=redis_url,
        user=user,
        key_prefix=f"bench-{name}",
        phase2_poll_interval_s=0.3,
        phase2_deadline_s=600,
    )
    context_of(settings)
    redis_client = redis.Redis.from_url(redis_url)
    done = threading.Event()
    worker = threading.Thread(
        target=drain_jobs, args=(redis_client, settings), kwargs={"until": done.is_set, "timeout_s": 10**6}
    )
    worker.start()
    model.set_mode(mode)
    extractions_before = model.counts().get("extraction", 0)
    headers = {"X-OpenViking-Account": "default", "X-OpenViking-User": user}
    sids = [f"{name}-{i}-{uuid.uuid4().hex[:6]}" for i in range(args.sessions)]
    memories: list[str] = []
    commits = 0
    with httpx.Client(base_url=ov_url, headers=headers, timeout=60, trust_env=False) as ov:
        for round_ in range(args.rounds):
            for i, sid in enumerate(sids):
                if i < args.memorable:
                    word = "w" + uuid.uuid4().hex[:10]
                    turn(ov, sid, f"I prefer {word} tea in the morning.")
                    memories.append(f"viking://user/{user}/memories/preferences/default/{word}_tea_morning.md")
                else:
                    turn(ov, sid, QUIET[(round_ + i) % len(QUIET)])
            requests = [ask(redis_client, settings, sid) for sid in sids]
            wait_final(redis_client, settings, requests)
            commits += len(requests)
        settled(redis_client, settings)
        in_run = read_lost_extractions(redis_client, settings, newest=0)
        found_in_run = found(ov, memories)
        # an hour on: the budget's window passed (its starts forgotten), the waiting suspects' turn
        redis_client.delete(Keys(settings.key_prefix).extraction_repair_starts("-"))
        waiting = waiting_suspects(redis_client, settings, "-")
        if waiting:
            schedule_repair(redis_client, settings, next(iter(waiting.values())).request, 0)
            settled(redis_client, settings)
        found_later = found(ov, memories)
    done.set()
    worker.join()
    lost = read_lost_extractions(redis_client, settings, newest=0)
    model.set_mode("normal")
    return {
        "scenario": name,
        "commits": commits,
        "repairs": f"{in_run.repairs_started} -> {lost.repairs_started}",
        "extra": f"{100.0 * in_run.repairs_started / commits:.1f}% -> {100.0 * lost.repairs_started / commits:.1f}%",
        "waiting": f"{in_run.suspects_waiting} -> {lost.suspects_waiting}",
        "lost": f"{in_run.lost_total} -> {lost.lost_total}",
        "extractions": model.counts().get("extraction", 0) - extractions_before,
        "memories": f"{found_in_run} -> {found_later} of {len(memories)}",
    }


def found(ov: httpx.Client, memories: list[str]) -> int:
    """How many of the expected memory files OV holds."""
    return sum(
        1
        for uri in memories
        if (r := ov.get("/api/v1/content/read", params={"uri": uri})).status_code == 200
        and "tea in the morning" in str(r.json().get("result"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memorable", type=int, default=3)
    args = parser.parse_args()
    with ExitStack() as stack:
        redis_server = start_redis_server()
        stack.callback(redis_server.stop)
        ov_url, model = start_local_stack_with_model(stack, lambda line: print(line, flush=True))
        rows = [
            scenario("merge-works", "normal", ov_url, model, redis_server.url, args),
            scenario("merge-dropped", "drop-merge", ov_url, model, redis_server.url, args),
        ]
    print(
        f"{args.sessions} sessions of one user side by side, {args.rounds} rounds, "
        f"{args.memorable} memorable a round; extractionRepairsPerHour {Settings().extraction_repairs_per_hour}"
    )
    print("each figure: when the run's repairs settled -> an hour on (the budget's window passed)")
    columns = ("scenario", "commits", "repairs", "extra", "waiting", "lost", "extractions", "memories")
    widths = (14, 7, 9, 14, 9, 7, 11, 14)
    print("  ".join(f"{c:<{w}}" for c, w in zip(columns, widths, strict=True)))
    for row in rows:
        print("  ".join(f"{row[c]!s:<{w}}" for c, w in zip(columns, widths, strict=True)))


if __name__ == "__main__":
    main()
