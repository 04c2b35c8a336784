"""Which layout of what it keeps a deployment's Redis holds, and the live migrations between
layouts (``ovstream migrate``; docs/UPGRADING.md, "What is kept in Redis").

``STORE_SCHEMA`` is the layout this release reads and writes: key names and shapes, the data
its Lua scripts keep, the RQ job paths queued jobs name. A release that changes any of them
either keeps the previous layout readable beside its own for a release (a rolling upgrade runs
both on one Redis), or raises ``STORE_SCHEMA`` and adds the step that moves a deployment's
data from the layout before (``MIGRATIONS``). tests/unit/test_stored_names.py fails when a
name changes with neither.

The deployment record (workers.store.deployment) says the layout: the first process of a
new deployment records its own; a deployment from before layouts were recorded (0.1.0,
0.2.0) holds schema 1, the first. A process refuses to start on a layout it does not know
(newer: a rollback past a migration; older: ``ovstream migrate`` not run yet).

A step is idempotent and resumable: it may be run again after a crash midway and finds
what it already moved; ``migrate`` records each step's layout once the step is done, so a
second run starts after the last one done.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from core.config import Settings
from workers.store.connection import optional_text
from workers.store.keys import Keys

STORE_SCHEMA = 1
"""The layout of what this release keeps in Redis."""
SCHEMA_FIELD = "schema"
"""The deployment record's field that says the layout its Redis holds."""
UNRECORDED_SCHEMA = 1
"""The layout of a deployment whose record says none (made before layouts were recorded)."""


class SchemaTooNew(Exception):
    """The deployment's Redis holds a layout newer than this release knows."""


Step = Callable[[redis.Redis, Settings], int]
"""Moves a deployment's data to one layout from the one before; returns how many items it moved."""

MIGRATIONS: dict[int, Step] = {}
"""layout N -> the step from N - 1 to N (none yet: every name kept since 0.1.0 is still read)."""


def stored_schema(client: redis.Redis, settings: Settings) -> int | None:
    """The layout the deployment's Redis holds (None: no deployment there yet)."""
    key = Keys(settings.key_prefix).deployment()
    with client.pipeline(transaction=False) as pipe:
        pipe.exists(key)
        pipe.hget(key, SCHEMA_FIELD)
        exists, schema = pipe.execute()
    return recorded_schema(schema) if exists else None


def recorded_schema(value: object) -> int:
    """The layout a deployment record's ``schema`` field says (none: the first)."""
    text = optional_text(value)
    return UNRECORDED_SCHEMA if text is None else int(text)


def schema_problem(recorded: int | None) -> str | None:
    """Why a process of this release must not run on a Redis holding layout ``recorded``."""
    if recorded is None or recorded == STORE_SCHEMA:
        return None
    if recorded > STORE_SCHEMA:
        return (
            f"this deployment's Redis holds layout {recorded}, newer than this release's ({STORE_SCHEMA}): "
            "run the release that migrated it (a rollback past `ovstream migrate` is not possible, "
            "docs/UPGRADING.md)"
        )
    return (
        f"this deployment's Redis holds layout {recorded}, this release reads {STORE_SCHEMA}: "
        "run `ovstream migrate` first (docs/UPGRADING.md)"
    )


def migrate(client: redis.Redis, settings: Settings, *, dry_run: bool = False, say: Callable[[str], None]) -> int:
    """Move the deployment to ``STORE_SCHEMA``, step by step; the layout it ends on."""
    key = Keys(settings.key_prefix).deployment()
    recorded = stored_schema(client, settings)
    if recorded is None:
        say(f"no deployment under keyPrefix {settings.key_prefix!r} yet: its first process says layout {STORE_SCHEMA}")
        return STORE_SCHEMA
    if recorded > STORE_SCHEMA:
        raise SchemaTooNew(str(schema_problem(recorded)))
    if recorded == STORE_SCHEMA:
        say(f"layout {recorded}: nothing to migrate")
        if not dry_run:  # a deployment from before layouts were recorded says its own from now on
            client.hsetnx(key, SCHEMA_FIELD, recorded)
        return recorded
    for layout in range(recorded + 1, STORE_SCHEMA + 1):
        step = MIGRATIONS[layout]
        if dry_run:
            say(f"layout {layout - 1} -> {layout}: {step.__doc__ or step.__name__} (not run: --dry-run)")
            continue
        moved = step(client, settings)
        client.hset(key, SCHEMA_FIELD, layout)  # done: a second run starts after it
        say(f"layout {layout - 1} -> {layout}: {moved} items moved")
    return recorded if dry_run else STORE_SCHEMA
