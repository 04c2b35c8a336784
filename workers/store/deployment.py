"""What every process of one deployment must agree on, recorded in Redis by the first to start.

``shards`` decides which hash tag each session's records have (applied offsets, snapshots,
commits), and the first generation's streams: a process with another count reads and writes
other keys than the rest, so a session's records would split between two layouts. A live
reshard (workers.store.shard_map) changes the streams only, and records them here too. The
first process to start records its count; every later one, and the plugin before it
publishes, compares and refuses on a mismatch. README "Changing shards" says how to change
the streams. The record also says the layout of what Redis holds (workers.store.schema): a
process of a release that reads another refuses to start.
"""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

from core.config import Settings
from workers.store.connection import RedisConfigError, optional_text
from workers.store.keys import Keys
from workers.store.schema import STORE_SCHEMA, recorded_schema, schema_problem
from workers.store.scripts import DEPLOYMENT_RECORD

SHARDS_FIELD = "shards"


class DeploymentMismatch(RedisConfigError):
    """This process's settings disagree with what its deployment recorded in Redis."""


def _verdict(settings: Settings, recorded: object, streams: object = None) -> None:
    value = optional_text(recorded)
    if value is not None and value != str(settings.shards) and optional_text(streams) == str(settings.shards):
        raise DeploymentMismatch(  # what an operator writes after `ovstream reshard`: say what to keep
            f"shards = {settings.shards} is the number of streams `ovstream reshard` gave this deployment "
            f"(keyPrefix {settings.key_prefix!r}), but shards must stay the count it was created with, "
            f"{value}: it decides where each session's records live. Every process follows a reshard by "
            "itself; set shards back to "
            f"{value} (README, 'Changing shards')."
        )
    if value is not None and value != str(settings.shards):
        raise DeploymentMismatch(
            f"shards = {settings.shards}, but this deployment (keyPrefix {settings.key_prefix!r}) runs with "
            f"shards = {value}: a process with another count would read and write other records and "
            "break per-session order. Set shards to the recorded count (the one the deployment was "
            "created with: `ovstream reshard` changes its streams, never this), see the README, "
            "'Changing shards'."
        )


def _verdicts(settings: Settings, recorded: list[object]) -> None:
    shards, schema, *streams = recorded  # the streams since 0.4.0's script
    _verdict(settings, shards, streams[0] if streams else None)
    problem = schema_problem(recorded_schema(schema))
    if problem is not None:
        raise DeploymentMismatch(problem)


def check_deployment(client: redis.Redis, settings: Settings) -> None:
    """Record this deployment's shard count and layout (workers.store.schema) if none is, else
    raise ``DeploymentMismatch`` when this process's differ."""
    _verdicts(settings, DEPLOYMENT_RECORD(client, _record_of(settings), [settings.shards, STORE_SCHEMA]))


async def check_deployment_async(client: aioredis.Redis, settings: Settings) -> None:
    """``check_deployment`` on an asyncio client."""
    recorded = await DEPLOYMENT_RECORD.run(client, _record_of(settings), [settings.shards, STORE_SCHEMA])
    _verdicts(settings, recorded)


def _record_of(settings: Settings) -> list[str]:
    return [Keys(settings.key_prefix).deployment()]
