"""A rolling upgrade from the previous release to this tree under load, and back
(docs/UPGRADING.md), with the real openviking-server running phase 2.

The previous release is the commit CHANGELOG.md records for it, exported from this clone's
history with ``git archive`` and run with this checkout's Python and dependencies. Under a
steady load of turns, as an operator upgrades: the commit worker first (SIGKILLed while
commits are in flight: an upgrade that goes wrong midway), then each capture process with
SIGTERM; ``ovstream status`` shows both releases while they are mixed. Then back the same way.
Then: every turn of every session in OV once and in order, every commit final as OV reports
it, no dead letter, no traceback, and no WARNING from the switches (what one release leaves
the other is read as such, not as lost work).

Not asserted, on purpose: "never two phase 2 of one user at once". Since 0.2.0 commits of
one OV user run side by side: OV 0.5.2 merges overlapping extractions itself (issue 40,
docs/OV-NOTES.md), so the rule the previous releases' per-user lock kept is gone.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from core.events import TurnEvent
from tests.chaos.conftest import PROCESSES, ChaosWorld, chaos_world
from tests.helpers.chaos import FILLER, Ledger, Load, chaos_turn, expected_ids, measure
from workers.commits.api import read_lost_extractions
from workers.status import read_status
from workers.store.dead_letters import list_dead_letters
from workers.store.health import UNSAID_RELEASE
from workers.version import installed_version

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = [f"upgrade-{i}" for i in range(6)]
RATE = 6.0
"""Turns a second over all sessions (a commit per session about every ten of its turns)."""
SETTLE_S = 8.0
"""Load run between two steps of the switch."""
CAUGHT_UP_S = 120.0
COMMITS_FINAL_S = 360.0
"""Guards against work that never ends, not speed targets (phase 2 on the real OV takes
seconds of its CPU each, on a busy 2-core machine)."""


def memorable_turn(session: str, index: int) -> TurnEvent:
    """A chaos turn whose user says a preference (the dev model extracts it): every phase 2
    writes memories, so none reads as an extraction lost and repaired."""
    return chaos_turn(session, index, lambda s, i: f"I prefer {s.replace('-', '')}topic{i} over others. {FILLER}")


def previous_release() -> tuple[str, str]:
    """(version, commit) of the newest release before this one, as CHANGELOG.md records it."""
    sections = (ROOT / "CHANGELOG.md").read_text().split("\n## ")[2:]  # [0] the preamble, [1] this release
    for section in sections:
        recorded = re.search(r"commit ([0-9a-f]{40})", section)
        if recorded:
            return section.split("\n", 1)[0].strip(), recorded[1]
    raise AssertionError("CHANGELOG.md records no commit of an earlier release")


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    version, commit = previous_release()

    def present() -> bool:
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], check=False)
        return found.returncode == 0

    if not present():  # a shallow clone: its history, from where it was cloned
        subprocess.run(["git", "-C", str(ROOT), "fetch", "--quiet", "--unshallow"], check=False, timeout=300)
    if not present():
        pytest.fail(f"release {version}'s commit {commit} is not in this clone, nor fetched (`git fetch --unshallow`)")
    tree = tmp_path_factory.mktemp(f"ovstream-{version}")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


@pytest.fixture(scope="module")
def world() -> Iterator[ChaosWorld]:
    with chaos_world() as started:
        yield started


def _switch(world: ChaosWorld, name: str, tree: Path | None) -> None:
    """Stop ``name`` with SIGTERM, as an orchestrator does, and start it from ``tree``."""
    assert world.deployment.terminate(name) == 0, world.deployment.log(name)
    _start(world, name, tree)


THIS_RELEASE: dict[str, list[tuple[int, int | None]]] = {}
"""Process name -> the byte ranges of its log this release wrote (a run of it: from its start to
the next start of that name by the previous release)."""


def _started(world: ChaosWorld, name: str, tree: Path | None) -> None:
    """Mark where in ``name``'s log this start begins, and which release it runs."""
    path = world.deployment.workdir / f"{name}.log"
    at = path.stat().st_size if path.exists() else 0
    runs = THIS_RELEASE.setdefault(name, [])
    if runs and runs[-1][1] is None:
        runs[-1] = (runs[-1][0], at)  # this release's run of it ended here
    if tree is None:
        runs.append((at, None))


def _start(world: ChaosWorld, name: str, tree: Path | None) -> None:
    deployment = world.deployment
    _started(world, name, tree)
    deployment.start(name, tree)
    time.sleep(SETTLE_S)
    assert not deployment.exited(), (deployment.exited(), deployment.log(name))


def _releases(ledger: Ledger) -> dict[str, int]:
    """The releases ``ovstream status`` says the live processes run."""
    return read_status(ledger.redis, ledger.settings).releases


def _status_shows(ledger: Ledger, releases: dict[str, int]) -> None:
    """Wait until ``ovstream status`` says ``releases``. Not read once: a process not heard of
    for ``STALE_AFTER_S`` (5 s) is counted stale, and on CI's busy machine one of three beat
    late right after a switch (it showed 2 of 3)."""
    seen: list[dict[str, int]] = []

    def shown() -> bool:
        seen.append(_releases(ledger))
        return seen[-1] == releases

    try:
        measure(shown, timeout_s=CAUGHT_UP_S, what=f"status showing releases {releases}")
    except AssertionError as failed:
        raise AssertionError(f"{failed}; it showed {seen[-1]}") from None


def kill_in_flight(world: ChaosWorld, ledger: Ledger) -> set[str]:
    """SIGKILL the worker once a commit is in flight; the commits it may have held: every one
    not final right after the kill (a commit requested between a look and the kill counts)."""
    measure(lambda: bool(ledger.unsettled()), timeout_s=CAUGHT_UP_S, what="a commit in flight before the switch")
    world.deployment.kill("worker")
    return ledger.unsettled()


def _warnings(world: ChaosWorld) -> list[str]:
    """This release's WARNING lines. The previous release's are its own (a rolling switch's
    SIGTERM can strand a job, which 0.2.0 says at WARNING and this release at INFO): nothing
    this tree can change, so not judged here; what it loses or repeats is, below."""
    found = []
    for name in PROCESSES:
        text = (world.deployment.workdir / f"{name}.log").read_bytes()
        for start, end in THIS_RELEASE.get(name, []):
            part = text[start:end].decode(errors="replace")
            found += [f"{name}: {line}" for line in part.splitlines() if " WARNING " in line]
    return found


def test_a_rolling_upgrade_and_back_under_load_loses_nothing(world: ChaosWorld, previous_tree: Path) -> None:
    deployment = world.deployment
    # What 0.2.0 left under the name it counted every suspicion by (42 after its upgrade run):
    # this release must not read it as losses (issue 54: a stored name keeps its meaning).
    world_redis = redis.Redis.from_url(deployment.settings.redis_url)
    world_redis.set(f"{deployment.settings.key_prefix}:extractions-lost", 42)
    world_redis.close()
    THIS_RELEASE.clear()
    for name in PROCESSES:
        _started(world, name, previous_tree)
        deployment.start(name, previous_tree)
    ledger = Ledger(deployment.settings, world.ov.url, SESSIONS)
    load = Load(deployment.settings, SESSIONS, RATE, memorable_turn).start()
    try:
        open_at_kill = kill_in_flight(world, ledger)
        _start(world, "worker", None)  # SIGKILLed mid-commit, started as this release
        _switch(world, "capture-a", None)
        _status_shows(ledger, {installed_version(): 2, UNSAID_RELEASE: 1})  # both releases side by side
        _switch(world, "capture-b", None)
        _status_shows(ledger, {installed_version(): len(PROCESSES)})
        for name in ("capture-b", "capture-a", "worker"):  # and back, in the opposite order
            _switch(world, name, previous_tree)
        assert load.running(), "the load ended before the switches did"
        turns = load.finish(timeout_s=CAUGHT_UP_S)
        end = load.marks()
        measure(lambda: ledger.caught_up(end), timeout_s=CAUGHT_UP_S, what="the last turns applied")
        measure(lambda: not ledger.unsettled(), timeout_s=COMMITS_FINAL_S, what="every commit final")

        for session in SESSIONS:  # 0 lost, 0 twice, in order
            stored = ledger.ov_ids(session)
            assert stored == expected_ids(session, turns), (session, len(stored), stored[:4])
        commits = [o for s in SESSIONS for o in ledger.commits(s)]
        assert len(commits) >= len(SESSIONS)
        for outcome in commits:
            assert outcome.status in ("completed", "skipped"), outcome
            if outcome.task_id:
                assert ledger.task_status(outcome.task_id) == outcome.status, outcome  # as OV says
        assert list_dead_letters(ledger.redis, deployment.settings) == []
        for name in PROCESSES:
            log = deployment.log(name, lines=1_000_000)
            assert "Traceback" not in log, (name, log[-5000:])
        # lost extractions: as many as the repairs that wrote memories, never the old name's 42
        # (a repair by the previous release in its window counts under its own name: at most as many)
        lost = read_lost_extractions(ledger.redis, deployment.settings, newest=1000)
        repaired = sum(1 for _, _, memories in lost.newest if memories)
        assert read_status(ledger.redis, deployment.settings).extractions_lost == lost.lost_total
        assert lost.lost_total <= repaired, (lost.lost_total, repaired, lost.repairs)
        # the switches said nothing; the SIGKILL's recovery names only commits it interrupted
        assert not [w for w in _warnings(world) if not any(c in w for c in open_at_kill)], _warnings(world)
        print(
            f"upgrade {previous_release()[0]} -> {installed_version()} -> back: {len(SESSIONS)} sessions x "
            f"{turns} turns, {len(commits)} commits ({len(open_at_kill)} open when the worker was killed; "
            f"{len(_warnings(world))} WARNING lines, each about one of them)"
        )
    finally:
        load.finishing.set()
        ledger.close()
