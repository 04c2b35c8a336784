"""Every test tier, in lanes that run side by side (``./test``), then one summary.

A lane is a list of tiers that run one after another in one pytest process, each process with
its own redis-servers and openviking-server: the real OpenClaw host's rows (``host``), its
import phase (``import``), the rest of the real-OV tier (``ov``), the fault tiers that kill
processes (``faults``: chaos and the rolling upgrade) and fail Redis over (``cluster``), the
capture tier in three parts (``capture``, ``capture2``, ``capture3``), the slow tier (``slow``),
the RPC tier (``rpc``) and the quick ones (``fast``: unit, the console, deploy); the plugin's
node tests are a lane of their own. Each lane writes its output to
``.artifacts/lanes/<lane>.log`` and its tests' durations (and CPU) to a JUnit file; when all
are done this prints each lane's end, a table of wall time and CPU per lane and per tier, the
costliest tests, the failed tests with the lane (and log) to read, and one closing line
``N passed, N failed``.

    .venv/bin/python scripts/lanes.py [pytest arguments...]

Arguments go to every pytest lane (``-m "not ov"``, ``-k name``); a lane whose tiers the
arguments select nothing of is said to have run nothing, which is no failure, as long as some
lane ran tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OVSTREAM_ARTIFACTS", ROOT / ".artifacts")) / "lanes"
PYTEST_NO_TESTS = 5


@dataclass
class Lane:
    name: str
    command: list[str]
    tiers: list[str] = field(default_factory=list)
    started: float = 0.0
    took: float = 0.0
    cpu: float = 0.0
    """CPU seconds of the lane's process and every process it waited for (os.wait4)."""
    code: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    cwd: Path = ROOT

    @property
    def log(self) -> Path:
        return OUT / f"{self.name}.log"

    @property
    def junit(self) -> Path:
        return OUT / f"{self.name}.xml"


HOST_TESTS = ["tests/integration/test_host_openclaw.py"]
"""The real OpenClaw gateway's rows: the longest test file, a lane of its own."""
IMPORT_TESTS = ["tests/integration/test_host_import.py"]
"""The real host's import phase (about 6 minutes beside a CPU hog): a lane of its own too."""
CAPTURE_WAITING = [
    f"tests/capture/{name}.py"
    for name in ("test_capture_backlog", "test_cli_answers", "test_recovery_speed", "test_commits_side_by_side")
]
"""Capture tests that mostly wait (backlogs through a slow OV, the demo, recoveries): half the
capture tier's time and little of its CPU, so they run beside the other half."""
CAPTURE_PROCESSES = [
    f"tests/capture/{name}.py"
    for name in (
        "test_autoscaling",
        "test_capture_crash",
        "test_idle_and_stop",
        "test_ov_refuses_key",
        "test_processes",
    )
]
"""Capture tests of real processes started, stopped and killed (~370 s of the rest's ~790 s
loaded, little CPU): a third lane, since the rest's lane ended last once the host's turns
stopped being CLI runs."""


NICE = ["nice", "-n", "5"]
"""Every lane but the fault tiers' yields some of the CPU (a third of a nice-0 share each): those
measure recovery (a failover, a rolling upgrade under load) and would otherwise compete with
three other lanes for two cores. At nice 10, beside a CPU hog, the fast lane all but stopped."""


def pytest_lane(
    name: str, paths: list[str], args: list[str], *, ignore: tuple[str, ...] = (), nice: bool = True
) -> Lane:
    junit = OUT / f"{name}.xml"
    command = [*(NICE if nice else []), sys.executable, "-m", "pytest", *paths, *(f"--ignore={p}" for p in ignore)]
    command += [f"--junitxml={junit}", "-p", "no:cacheprovider", *args]
    return Lane(name, command, [p.removeprefix("tests/") for p in paths])


def lanes(args: list[str]) -> list[Lane]:
    """Balanced by the tiers' times measured loaded (the lanes' summary prints them, with each
    lane's CPU): the machine is busy, but lanes that mostly wait (capture, the slow tier) get
    more done beside each other than one after another. Beside a CPU hog (2026-12-06, 885 s in
    all, before the fault and capture lanes were split): the host's rows ~715 s (~900 before
    their turns went through the gateway's HTTP endpoint), the import phase ~480 s, the rest of
    the real-OV tier ~650 s, chaos and the upgrade ~320 s, the cluster tier ~545 s (one lane,
    884 s, ended last), capture's waiting part ~750 s and the rest ~860 s (its process tests
    ~370 s of it), the slow tier ~710 s, the RPC tier ~700 s, the other quick tiers ~810 s,
    the plugin's node tests ~470 s."""
    out = [
        pytest_lane("host", HOST_TESTS, args),
        pytest_lane("import", IMPORT_TESTS, args),
        pytest_lane("ov", ["tests/integration"], args, ignore=(*HOST_TESTS, *IMPORT_TESTS)),
        pytest_lane("faults", ["tests/chaos"], args, nice=False),
        pytest_lane("cluster", ["tests/cluster"], args, nice=False),
        pytest_lane("capture", CAPTURE_WAITING, args),
        pytest_lane("capture2", ["tests/capture"], args, ignore=(*CAPTURE_WAITING, *CAPTURE_PROCESSES)),
        pytest_lane("capture3", CAPTURE_PROCESSES, args),
        pytest_lane("slow", ["tests/slow"], args),
        pytest_lane("rpc", ["tests/rpc"], args),
        pytest_lane("fast", [f"tests/{t}" for t in ("unit", "console", "deploy")], args),
    ]
    built = ROOT / "clients" / "openclaw" / "dist" / "test"
    if built.is_dir():
        # The build scripts/bootstrap.sh made from this tree, as the host lane installs it: the
        # plugin's own run-tests.sh would reinstall its modules and rebuild dist while the host
        # lane's gateway loads them (it failed to collect: "the plugin is not built").
        tests = sorted(str(p.relative_to(built.parents[1])) for p in built.glob("*.test.js"))
        command = ["node", "--test", "--test-concurrency=1", *tests]
        out.append(Lane("plugin", [*NICE, *command], ["plugin (node)"], cwd=built.parents[1]))
    elif built.parents[1].is_dir():  # a lane that fails and says why, never one left out
        said = "the plugin is not built: scripts/bootstrap.sh openclaw builds it (npm run build)"
        out.append(Lane("plugin", ["sh", "-c", f"echo '{said}'; exit 1"], ["plugin (node)"]))
    return out


def start(lane: Lane) -> None:
    lane.started = time.monotonic()
    with lane.log.open("wb") as log:
        lane.proc = subprocess.Popen(
            lane.command, cwd=lane.cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def tier_of(classname: str, file: str | None) -> str:
    parts = (file or classname.replace(".", "/")).split("/")
    return parts[1] if len(parts) > 1 and parts[0] == "tests" else "?"


@dataclass
class Cost:
    test: str
    lane: str
    seconds: float
    cpu: float


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0


def junit_counts(lane: Lane, costs: list[Cost]) -> tuple[dict[str, Counts], list[str]]:
    """Per tier: tests passed, failed (errors too) and skipped, and their seconds; the failed ids,
    each with why.
    Each test's wall and CPU seconds (its ``cpu_s`` property, tests/conftest.py) go in ``costs``."""
    tiers: dict[str, Counts] = defaultdict(Counts)
    failed: list[str] = []
    if not lane.junit.exists():
        return tiers, failed
    for case in ET.parse(lane.junit).getroot().iter("testcase"):
        classname = case.get("classname", "")
        cpu = next((p.get("value") for p in case.iter("property") if p.get("name") == "cpu_s"), None)
        test = f"{classname.replace('.', '/')}.py::{case.get('name')}"
        costs.append(Cost(test, lane.name, float(case.get("time") or 0), float(cpu or 0)))
        tier = tier_of(classname, case.get("file"))
        counts = tiers[tier]
        counts.seconds += float(case.get("time") or 0)
        fault = case.find("failure") if case.find("failure") is not None else case.find("error")
        if fault is not None:
            counts.failed += 1
            failed.append(f"{test}\n      {why(fault)}")
        elif case.find("skipped") is not None:
            counts.skipped += 1
        else:
            counts.passed += 1
    return tiers, failed


WHY_CHARS = 400
"""How much of a failure's message the summary prints: CI's report shows the end of the output,
where a lane's log is not (its first failed tests all said "see the log", and the log was gone)."""


def why(fault: ET.Element) -> str:
    """A failure's message on one line, cut to ``WHY_CHARS`` (whether the test's setup erred)."""
    said = " ".join((fault.get("message") or fault.text or "").split())
    kind = "error" if fault.tag == "error" else "failed"
    return f"{kind}: {said[:WHY_CHARS]}{' ...' if len(said) > WHY_CHARS else ''}"


def node_counts(lane: Lane) -> Counts:
    """The plugin's counts from node's test runner's closing lines (``ℹ pass N``)."""
    counts = Counts(seconds=lane.took)
    for line in lane.log.read_text(errors="replace").splitlines()[-40:]:
        words = line.split()
        if len(words) == 3 and words[0] == "ℹ" and words[2].isdigit():
            if words[1] == "pass":
                counts.passed = int(words[2])
            elif words[1] == "fail":
                counts.failed = int(words[2])
            elif words[1] == "skipped":
                counts.skipped = int(words[2])
    return counts


def tail(path: Path, lines: int) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def main(args: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    running = lanes(args)
    show_all = "-s" in args or "--capture=no" in args  # what the tests print is what was asked for
    began = time.monotonic()
    for lane in running:
        start(lane)
        print(f"[lanes] {lane.name}: {' '.join(lane.tiers)} (log {lane.log.relative_to(ROOT)})", flush=True)
    waiting = list(running)
    while waiting:
        for lane in list(waiting):
            assert lane.proc is not None
            pid, status, usage = os.wait4(lane.proc.pid, os.WNOHANG)
            if pid == 0:
                continue
            code = lane.proc.returncode = os.waitstatus_to_exitcode(status)
            lane.code, lane.took = code, time.monotonic() - lane.started
            lane.cpu = usage.ru_utime + usage.ru_stime
            waiting.remove(lane)
            print(f"\n[lanes] ===== {lane.name} done in {lane.took:.0f} s (exit {code}) =====", flush=True)
            shown = 1_000_000 if show_all else 25 if code not in (0, PYTEST_NO_TESTS) else 6
            print(tail(lane.log, shown), flush=True)
        time.sleep(0.5)
    return summary(running, time.monotonic() - began)


COSTLIEST = 12
"""Tests listed by their wall time and by their CPU after every run."""


def costliest(costs: list[Cost]) -> None:
    """The tests that take longest and those that cost the machine most: where time can go."""
    for title, key in (("wall", lambda c: c.seconds), ("CPU", lambda c: c.cpu)):
        print(f"\n[lanes] the {COSTLIEST} longest tests by {title} seconds (wall, CPU, lane)")
        for c in sorted(costs, key=key, reverse=True)[:COSTLIEST]:
            print(f"  {c.seconds:>6.0f} {c.cpu:>6.0f}  {c.lane:<8} {c.test}")


def summary(done: list[Lane], wall: float) -> int:
    total, failures, ran_nothing = Counts(), [], []
    costs: list[Cost] = []
    print("\n[lanes] wall time per lane and tier (tier seconds: its tests' own durations)")
    print(f"  {'lane':<8} {'tier':<14} {'passed':>7} {'failed':>7} {'skipped':>8} {'seconds':>8}")
    for lane in done:
        if lane.name == "plugin":
            per_tier = {"plugin (node)": node_counts(lane)}
            failed_ids = ["clients/openclaw (node tests): see the log"] if lane.code else []
        else:
            per_tier, failed_ids = junit_counts(lane, costs)
        for tier, c in sorted(per_tier.items()):
            print(f"  {lane.name:<8} {tier:<14} {c.passed:>7} {c.failed:>7} {c.skipped:>8} {c.seconds:>8.0f}")
            total.passed, total.failed, total.skipped = (
                total.passed + c.passed,
                total.failed + c.failed,
                total.skipped + c.skipped,
            )
        print(f"  {lane.name:<8} {'(lane wall)':<14} {'':>7} {'':>7} {'':>8} {lane.took:>8.0f}")
        print(f"  {lane.name:<8} {'(lane CPU)':<14} {'':>7} {'':>7} {'':>8} {lane.cpu:>8.0f}")
        if lane.code == PYTEST_NO_TESTS:
            ran_nothing.append(lane.name)
        elif lane.code != 0:
            failures.append((lane, failed_ids))
    print(f"  {'all':<8} {'(wall)':<14} {'':>7} {'':>7} {'':>8} {wall:>8.0f}")
    print(f"  {'all':<8} {'(CPU)':<14} {'':>7} {'':>7} {'':>8} {sum(lane.cpu for lane in done):>8.0f}")
    costliest(costs)
    for lane, ids in failures:
        print(f"\n[lanes] FAILED lane {lane.name} (exit {lane.code}; log {lane.log.relative_to(ROOT)}):")
        for test in ids or ["(no test failed: the lane itself did; see its log)"]:
            print(f"  {test}")
        if not ids:
            total.failed += 1
    if ran_nothing:
        print(f"[lanes] ran nothing (the arguments selected none of their tests): {', '.join(ran_nothing)}")
    if total.passed + total.failed == 0:
        print("[lanes] no test ran at all")
        total.failed += 1
    print(f"{total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    return 1 if total.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
