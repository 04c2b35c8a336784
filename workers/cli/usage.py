"""``ovstream usage``: what each tenant cost, per hour or day (core.usage; the RPC's
``GET /v1/usage`` answers the same, each caller its own tenants): a table of the sums, and a
spark line of each tenant's OV requests over the buckets."""

from __future__ import annotations

import argparse
import json

from core.config import Settings
from core.usage import COLUMNS, PERIODS, Usage, add_up, busiest_first
from workers.cli.tables import table
from workers.rpc.usage import usage_answer
from workers.store.connection import connect
from workers.store.usage import read_usage

SPARKS = "▁▂▃▄▅▆▇█"


def spark(values: list[int]) -> str:
    """``values`` as a line of block characters, the largest a full block (a blank for none)."""
    top = max(values, default=0)
    if top <= 0:
        return " " * len(values)
    return "".join(" " if v <= 0 else SPARKS[min(len(SPARKS) - 1, (v * len(SPARKS) - 1) // top)] for v in values)


def render(by_bucket: dict[str, Usage], period: str) -> str:
    total = add_up(by_bucket.values())
    if not total:
        return f"no usage recorded in the last {len(by_bucket)} {period}(s)"
    tenants = busiest_first(total)
    rows = []
    for t in tenants:
        line = spark([b.get(t, {}).get("ov_requests", 0) for b in by_bucket.values()])
        rows.append([t, *(str(total[t].get(name, 0)) for _, name in COLUMNS), line])
    names = list(by_bucket)
    head = f"usage per tenant, the last {len(names)} {period}(s): {names[0]} .. {names[-1]} UTC"
    head += " ('-': the service's own user)"
    return head + "\n" + table(["tenant", *(h for h, _ in COLUMNS), f"OV reqs per {period}"], rows)


def add_usage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--period", choices=sorted(PERIODS), default="day", help="buckets of an hour or a day (UTC)")
    parser.add_argument("--buckets", type=int, default=7, help="how many of the last buckets (the current one last)")
    parser.add_argument("--tenant", default=None, help="only this tenant ('-': the service's own user)")
    parser.add_argument("--json", action="store_true", help="print what GET /v1/usage answers")


def cli_usage(settings: Settings, args: argparse.Namespace) -> int:
    if args.buckets < 1:
        print("ovstream usage: --buckets must be at least 1")
        return 2
    tenants = None if args.tenant is None else {args.tenant}
    by_bucket = read_usage(connect(settings), settings, args.period, args.buckets, tenants=tenants)
    print(json.dumps(usage_answer(by_bucket, args.period), indent=1) if args.json else render(by_bucket, args.period))
    return 0
