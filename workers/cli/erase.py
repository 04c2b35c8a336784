"""``ovstream erase``: remove a user, an agent or a session everywhere, and print the receipt
(workers.erasure.run; docs/PRIVACY.md)."""

from __future__ import annotations

import argparse
import json
import sys

from core.config import Settings
from core.erasure import ErasureScope
from core.ov.client import OVError
from workers.erasure.run import erase_with, tenant_of


def add_erase_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--user",
        required=True,
        help="the tenant label (a key of userApiKeys), or the deployment's own user (its `user` setting)",
    )
    parser.add_argument("--account", default=None, help="the OV account; refused unless it is the deployment's")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--agent", default=None, help="only this agent's sessions and memories")
    which.add_argument("--session", default=None, help="only this OV session (and the repairs of its commits)")
    parser.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
    parser.add_argument("--json", action="store_true", help="print the receipt as JSON")


def cli_erase(settings: Settings, args: argparse.Namespace) -> int:
    try:
        tenant, key = tenant_of(settings, args.user)
        if args.account is not None and args.account != settings.account:
            raise ValueError(f"account {args.account!r} is not this deployment's ({settings.account})")
        scope = ErasureScope(tenant, agent=args.agent, session=args.session)
    except ValueError as exc:
        print(f"ovstream erase: {exc}", file=sys.stderr)
        return 2
    try:
        receipt = erase_with(settings, scope, key, dry_run=args.dry_run, requested_by="cli")
    except OVError as exc:  # OV away, or still busy with the data: what is done stays done
        print(f"ovstream erase: stopped, OV answered {exc}; run the same command again: it resumes", file=sys.stderr)
        return 1
    print(json.dumps(receipt.as_json(), indent=1) if args.json else "\n".join(receipt.lines()))
    return 0
