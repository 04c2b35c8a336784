"""``ovstream reshard``: change the number of turn streams of a running deployment
(workers.store.shard_map)."""

from __future__ import annotations

import argparse
import sys
import time

from core.config import Settings
from core.shard_map import ReshardRefused
from workers.store.connection import RedisConfigError, connect
from workers.store.deployment import check_deployment
from workers.store.shard_map import previous_field, read_shard_map, reshard

RESHARD_WAIT_POLL_S = 0.5
"""How often ``ovstream reshard --wait`` looks whether the old generation retired."""


def add_reshard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, required=True, help="the new number of turn streams")
    parser.add_argument("--wait", action="store_true", help="return once the old streams are drained and retired")


def cli_reshard(settings: Settings, args: argparse.Namespace) -> int:
    client = connect(settings)
    try:
        check_deployment(client, settings)
        new = reshard(client, settings, args.shards)
    except (ReshardRefused, RedisConfigError) as exc:
        print(f"ovstream reshard: {exc}", file=sys.stderr)
        return 2
    print(
        f"generation {new.generation}: {new.shards} shards; publishers now use them, and capture reads each "
        f"new stream once its tag's old ones (generation {previous_field(new)}) are drained"
    )
    while args.wait and read_shard_map(client, settings).previous is not None:
        time.sleep(RESHARD_WAIT_POLL_S)
    if args.wait:
        print(f"generation {new.previous[0] if new.previous else '?'} retired: every old stream is drained")
    client.close()
    return 0
