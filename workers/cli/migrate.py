"""``ovstream migrate``: move what a deployment keeps in Redis to this release's layout
(workers.store.schema), step by step; idempotent and resumable (run it again after a crash)."""

from __future__ import annotations

import argparse
import sys

from core.config import Settings
from workers.store.connection import REDIS_ERRORS, connect
from workers.store.schema import STORE_SCHEMA, SchemaTooNew, migrate


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="say the steps, run none")


def cli_migrate(settings: Settings, args: argparse.Namespace) -> int:
    client = connect(settings)
    try:
        layout = migrate(client, settings, dry_run=args.dry_run, say=print)
    except SchemaTooNew as refused:
        print(f"ovstream migrate: {refused}", file=sys.stderr)
        return 2
    except REDIS_ERRORS as exc:
        print(f"ovstream migrate: Redis: {exc} (nothing is lost: run it again)", file=sys.stderr)
        return 1
    finally:
        client.close()
    print(f"layout {layout} (this release's: {STORE_SCHEMA})")
    return 0
