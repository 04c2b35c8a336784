"""What every process of one deployment must agree on, recorded in Redis by the first to start.

``shards`` decides which hash tag each session's records have (applied offsets, snapshots,
commits), and the first generation's streams: a process with another count reads and writes
other keys than the rest, so a session's records would split between two layouts. A live
reshard (workers.store.shard_map) changes the streams only, and records them here too. The
first process to start records its count (``HSETNX``); every later one, and the plugin before
it publishes, compares and refuses on a mismatch. README "Changing shards" says how to change
the streams.
"""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

from core.config import Settings
from workers.store.connection import RedisConfigError, optional_text
from workers.store.keys import Keys

SHARDS_FIELD = "shards"


class DeploymentMismatch(RedisConfigError):
    """This process's settings disagree with what its deployment recorded in Redis."""


def _verdict(settings: Settings, recorded: object) -> None:
    value = optional_text(recorded)
    if value is not None and value != str(settings.shards):
        raise DeploymentMismatch(
            f"shards = {settings.shards}, but this deployment (keyPrefix {settings.key_prefix!r}) runs with "
            f"shards = {value}: a process with another count would read and write other records and "
            "break per-session order. Set shards to the recorded count (the one the deployment was "
            "created with: `ovstream reshard` changes its streams, never this), see the README, "
            "'Changing shards'."
        )


def check_deployment(client: redis.Redis, settings: Settings) -> None:
    """Record this deployment's shard count if none is, else raise ``DeploymentMismatch`` when it differs."""
    key = Keys(settings.key_prefix).deployment()
    client.hsetnx(key, SHARDS_FIELD, settings.shards)
    _verdict(settings, client.hget(key, SHARDS_FIELD))


async def check_deployment_async(client: aioredis.Redis, settings: Settings) -> None:
    """``check_deployment`` on an asyncio client."""
    key = Keys(settings.key_prefix).deployment()
    await client.hsetnx(key, SHARDS_FIELD, settings.shards)
    _verdict(settings, await client.hget(key, SHARDS_FIELD))
