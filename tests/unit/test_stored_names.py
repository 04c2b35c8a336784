"""What one release leaves in Redis the next must read: during a rolling upgrade both run on
one Redis (docs/UPGRADING.md). This pins every Redis name (``Keys``, each method called with
placeholder arguments), each Lua script's body (its SHA-1) and every RQ job path a queued job
names, with the layout they belong to (workers.store.schema), against
tests/unit/stored_names.txt. A change fails here until it is made on purpose, one of two ways:

- keep the old name readable beside the new one (or give the old job path an alias) for a
  release, say so in CHANGELOG.md and docs/UPGRADING.md, then
  ``.venv/bin/python -m tests.unit.test_stored_names --write --old-kept-readable``;
- or raise ``STORE_SCHEMA`` and add the step from the layout before to ``MIGRATIONS`` (run by
  ``ovstream migrate``), then ``.venv/bin/python -m tests.unit.test_stored_names --write``,
  which refuses while a layout has no step.

Each key is pinned with its meaning (the first line of its ``Keys`` docstring): a key that
comes to hold something else keeps no old name (the gate refuses it; a new name, or a step).
``--meaning-reworded`` pins a docstring reworded with the meaning unchanged.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from pathlib import Path

from core import defaults as d
from core.session import SessionAddress
from workers.store import schema, scripts
from workers.store.keys import Keys, SessionKeys

PINNED = Path(__file__).with_name("stored_names.txt")

JOB_PATHS = (
    "workers.commits.run.commit_session",
    "workers.commits.run.poll_phase2",
    "workers.commits.run.recheck_phase2",
    "workers.commits.repair.check_extraction",
    "workers.commits.repair_pool.repair_extractions",
)
"""Functions RQ jobs name by dotted path: a job queued by the previous release runs on this one."""

PLACEHOLDERS = {
    "int": 7,
    "str": "S",
    "str | None": "T",
    "int | StreamShard": 7,
    "SessionAddress": SessionAddress("SID", "AGENT", "TENANT"),
}


def _key_names() -> list[str]:
    keys = Keys("P")
    lines = []
    for name, method in inspect.getmembers(Keys, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = list(inspect.signature(method).parameters.values())[1:]
        args = [PLACEHOLDERS[str(p.annotation)] for p in params]
        value = getattr(keys, name)(*args)
        if isinstance(value, SessionKeys):
            value = {f: getattr(value, f) for f in value.__dataclass_fields__}
        lines.append(f"key {name}: {value}{MEANING}{meaning(method)}")
    return lines


MEANING = "  # "
"""Between a pinned key's name and its meaning."""


def meaning(method: object) -> str:
    """What a key holds, in one line: the first line of its ``Keys`` method's docstring."""
    return (inspect.getdoc(method) or "").splitlines()[0].strip() if inspect.getdoc(method) else ""


def meanings_changed(pinned: list[str], now: list[str]) -> list[str]:
    """Keys whose stored name stayed while what they hold was said anew: a reader of the old
    release would take one for the other (0.2.0's and 0.3.0's ``extractions-lost``)."""

    def split(lines: list[str]) -> dict[str, tuple[str, str]]:
        return {
            line.partition(":")[0]: (value, said)
            for line in lines
            if line.startswith("key ") and MEANING in line
            for value, _, said in [line.partition(": ")[2].partition(MEANING)]
        }

    before, after = split(pinned), split(now)
    return [
        f"{key}: {before[key][0]} held {before[key][1]!r}, now {after[key][1]!r}"
        for key in before.keys() & after.keys()
        if before[key][0] == after[key][0] and before[key][1] != after[key][1]
    ]


def _script_digests() -> list[str]:
    return [
        f"script {name}: {hashlib.sha1(lua.source.encode()).hexdigest()}"
        for name, lua in sorted(vars(scripts).items())
        if isinstance(lua, scripts.Lua)
    ]


def stored_names() -> list[str]:
    queue = f"queue <key_prefix>{d.COMMIT_QUEUE_SUFFIX}"
    return [*_key_names(), *_script_digests(), queue, *(f"job {path}" for path in JOB_PATHS)]


def test_every_job_path_still_names_a_function():
    for path in JOB_PATHS:
        module, _, name = path.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), path


def _pinned() -> tuple[int, list[str]]:
    first, *names = PINNED.read_text().splitlines()
    return int(first.removeprefix("layout ")), names


def missing_steps() -> list[int]:
    """Layouts after the first with no step from the one before."""
    return [n for n in range(2, schema.STORE_SCHEMA + 1) if n not in schema.MIGRATIONS]


def test_every_layout_has_its_migration_step():
    assert not missing_steps(), f"STORE_SCHEMA {schema.STORE_SCHEMA}: no MIGRATIONS step to {missing_steps()}"


def test_what_is_kept_in_redis_is_named_as_the_last_release_named_it():
    layout, pinned = _pinned()
    now = stored_names()
    gone = [line for line in pinned if line not in now]
    new = [line for line in now if line not in pinned]
    assert not gone and not new and layout == schema.STORE_SCHEMA, (
        "What ovstream keeps in Redis changed; the previous release, running beside this one in a"
        " rolling upgrade, would not read it (or this one its). Keep the old name readable for a"
        " release, or raise STORE_SCHEMA with a MIGRATIONS step (workers.store.schema); see this"
        " module's docstring for the command that pins it again.\n"
        f"layout pinned {layout}, now {schema.STORE_SCHEMA}\nchanged or gone: {gone}\nnew: {new}"
    )


def test_a_stored_name_keeps_its_meaning():
    _, pinned = _pinned()
    changed = meanings_changed(pinned, stored_names())
    assert not changed, (
        "A key kept in Redis says it holds something else under the same name: the previous"
        " release, or a deployment upgraded from it, would read one as the other. Give it a new"
        " name (or raise STORE_SCHEMA with a MIGRATIONS step that converts it); if only the"
        " wording changed, pin it again with --meaning-reworded.\n" + "\n".join(changed)
    )


def test_the_gate_finds_a_meaning_changed_under_one_name():
    pinned = ["key counter: P:lost  # Counter: every suspicion", "key other: P:o  # Set: ids"]
    now = ["key counter: P:lost  # Counter: repairs that wrote memories", "key other: P:o  # Set: ids"]
    assert meanings_changed(pinned, now) == [
        "key counter: P:lost held 'Counter: every suspicion', now 'Counter: repairs that wrote memories'"
    ]
    renamed = ["key counter: P:lost-repaired  # Counter: repairs that wrote memories", now[1]]
    assert meanings_changed(pinned, renamed) == []  # a new name: nothing to misread


def write(old_kept_readable: bool, meaning_reworded: bool = False) -> str:
    """Pin the names now; refused for a name changed or gone with neither a new layout nor the old
    kept readable (a name only added is new to the previous release, which never reads it)."""
    layout, pinned = _pinned()
    names = lambda lines: {line.partition(MEANING)[0] for line in lines}  # noqa: E731
    changed = bool(names(pinned) - names(stored_names()))  # a name gone or changed; one added reads as none
    if missing_steps():
        return f"refused: no MIGRATIONS step to layout {missing_steps()}"
    reread = meanings_changed(pinned, stored_names())
    if reread and layout == schema.STORE_SCHEMA and not meaning_reworded:
        return "refused: a key holds something new under its old name (give it a new name): " + "; ".join(reread)
    if changed and layout == schema.STORE_SCHEMA and not old_kept_readable:
        return (
            "refused: the names changed within layout "
            f"{layout}: raise STORE_SCHEMA with a step, or keep the old readable (--old-kept-readable)"
        )
    PINNED.write_text("\n".join([f"layout {schema.STORE_SCHEMA}", *stored_names()]) + "\n")
    return f"wrote {PINNED}"


if __name__ == "__main__" and sys.argv[1:2] == ["--write"]:
    said = write("--old-kept-readable" in sys.argv[2:], "--meaning-reworded" in sys.argv[2:])
    print(said)
    sys.exit(0 if said.startswith("wrote") else 1)
