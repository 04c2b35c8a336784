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
        lines.append(f"key {name}: {value}")
    return lines


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


def write(old_kept_readable: bool) -> str:
    """Pin the names now; refused for a name changed or gone with neither a new layout nor the old
    kept readable (a name only added is new to the previous release, which never reads it)."""
    layout, pinned = _pinned()
    changed = bool(set(pinned) - set(stored_names()))  # a name gone or changed; one added reads as none
    if missing_steps():
        return f"refused: no MIGRATIONS step to layout {missing_steps()}"
    if changed and layout == schema.STORE_SCHEMA and not old_kept_readable:
        return (
            "refused: the names changed within layout "
            f"{layout}: raise STORE_SCHEMA with a step, or keep the old readable (--old-kept-readable)"
        )
    PINNED.write_text("\n".join([f"layout {schema.STORE_SCHEMA}", *stored_names()]) + "\n")
    return f"wrote {PINNED}"


if __name__ == "__main__" and sys.argv[1:2] == ["--write"]:
    said = write("--old-kept-readable" in sys.argv[2:])
    print(said)
    sys.exit(0 if said.startswith("wrote") else 1)
