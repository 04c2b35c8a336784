"""``ovstream dlq``: list, replay or drop dead-lettered turn events (workers.store.dead_letters)."""

from __future__ import annotations

import argparse

from core.config import Settings
from workers.cli.tables import table, when
from workers.store.connection import connect
from workers.store.dead_letters import (
    DeadLetter,
    drop_dead_letters,
    list_dead_letters,
    not_replayed,
    replay_dead_letters,
    replay_summary,
)
from workers.store.keys import Keys


def add_dlq_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dlq_command", metavar="ACTION", required=True)
    lister = sub.add_parser("list", help="show dead-lettered turn events")
    lister.add_argument("--limit", type=int, default=100, help="most entries shown (default 100)")
    replay = sub.add_parser("replay", help="publish dead-lettered events again and remove them")
    replay.add_argument("ids", nargs="*", help="dead-letter ids (from `dlq list`)")
    replay.add_argument("--all", action="store_true", help="replay every dead letter")
    drop = sub.add_parser("drop", help="delete dead letters for good (turns given up on)")
    drop.add_argument("ids", nargs="+", help="dead-letter ids (from `dlq list`)")


def format_dead_letters(letters: list[DeadLetter]) -> str:
    header = ["ID", "FAILED (UTC)", "REASON", "DELIVERIES", "SESSION", "STREAM ENTRY", "ERROR"]
    rows = [
        [
            d.dlq_id,
            when(d.failed_at),
            d.reason,
            str(d.deliveries),
            d.session,
            f"{d.stream} {d.entry_id}",
            d.error.replace("\n", " ")[:80],
        ]
        for d in letters
    ]
    return table(header, rows)


def cli_dlq(settings: Settings, args: argparse.Namespace) -> int:
    redis = connect(settings)
    if args.dlq_command == "list":
        letters = list_dead_letters(redis, settings, limit=args.limit)
        total = redis.xlen(Keys(settings.key_prefix).dead_letters())
        if not letters:
            print("dead-letter stream is empty")
            return 0
        print(f"{total} dead letter(s)" + (f", oldest {len(letters)} shown" if total > len(letters) else ""))
        print(format_dead_letters(letters))
        return 0
    if args.dlq_command == "drop":
        try:
            dropped = drop_dead_letters(redis, settings, list(args.ids))
        except KeyError as exc:
            print(f"ovstream dlq drop: no dead letter {exc.args[0]} (ids as `ovstream dlq list` shows them)")
            return 1
        for letter, note in dropped:
            print(f"{letter.dlq_id} {note}")
        return 0
    if not args.ids and not args.all:
        print("ovstream dlq replay: name dead-letter ids or pass --all")
        return 2
    try:
        results = replay_dead_letters(redis, settings, None if args.all else list(args.ids))
    except KeyError as exc:
        print(f"ovstream dlq replay: no dead letter {exc.args[0]} (ids as `ovstream dlq list` shows them)")
        return 1
    if not results:
        print("ovstream dlq replay: no dead letters to replay")
        return 1
    for letter, new_id, note in results:
        target = f" -> {new_id}" if new_id else ""
        print(f"{letter.dlq_id} {note}{target}")
    print(replay_summary(results, notes=False))  # each letter's note is on its line above
    return 1 if not_replayed(results) else 0  # a letter not replayed is waiting still: not done
