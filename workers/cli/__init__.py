"""The ``ovstream`` console script.

Each subcommand lives in the module of its concern; this file only wires
argparse to them (imported lazily so ``ovstream --help`` stays fast and a
broken optional piece cannot take the others down).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from core.config import Settings
from core.config_load import ConfigError, load_settings
from workers import logs
from workers.store.connection import redis_went_away
from workers.version import installed_version

# subcommand -> ("module:function", help). The function takes (settings, args) -> int | None.
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": ("workers.capture.cli:cli_capture", "run a capture worker (Redis Streams consumer)"),
    "worker": ("workers.commits.worker:cli_worker", "run an RQ worker with scheduler for commit/poll jobs"),
    "rpc": ("workers.rpc.serve:cli_rpc", "serve assemble/compact/tools over HTTP"),
    "up": ("workers.dev.up:cli_up", "run capture, worker and rpc in one process"),
    "commits": ("workers.cli.commits:cli_commits", "show the commit outcomes of a session"),
    "dlq": ("workers.cli.dlq:cli_dlq", "list or replay dead-lettered turn events"),
    "erase": (
        "workers.cli.erase:cli_erase",
        "remove a user, an agent or a session from OV and Redis, with a receipt (docs/PRIVACY.md)",
    ),
    "reshard": ("workers.cli.reshard:cli_reshard", "change the number of turn streams of a running deployment"),
    "migrate": (
        "workers.cli.migrate:cli_migrate",
        "move what the deployment keeps in Redis to this release's layout (docs/UPGRADING.md)",
    ),
    "usage": ("workers.cli.usage:cli_usage", "what each tenant cost, per hour or day"),
    "status": ("workers.cli.status:cli_status", "per shard backlog and owner, processes, commits in flight"),
    "health": ("workers.cli.status:cli_health", "probe: exit 0 when this host's capture/worker process is alive"),
    "ov-account": (
        "workers.ov_account:cli_ov_account",
        "create ovstream's OV account and write its user key (OV in API-key mode)",
    ),
    "demo": ("workers.dev.demo:cli_demo", "replay the sample conversation and print assemble's answer"),
    "model-server": (
        "workers.dev.model_server:cli_model_server",
        "run the deterministic OpenAI-compatible model server",
    ),
    "fake-ov": (
        "workers.dev.fake_ov.server:cli_fake_ov",
        "serve the in-memory OpenViking fake over HTTP (tests, demos)",
    ),
}

SERVICES = frozenset({"capture", "worker", "rpc", "up", "demo", "model-server", "fake-ov"})
"""Commands that run until stopped: they log at INFO by default. An operator's command (status,
commits, dlq, ...) prints its result and logs only warnings and errors beside it."""

GLOBAL_OPTIONS_WITH_VALUE = frozenset({"--config", "--log-level"})
"""Options before the subcommand that take a value (skipped when looking for the subcommand)."""


def _resolve(target: str) -> Callable[..., int | None]:
    module_name, func_name = target.split(":")
    func: Callable[..., int | None] = getattr(importlib.import_module(module_name), func_name)
    return func


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (the first word that is not a global option or its value)."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``ovstream`` parser. Only ``command``'s module is imported, for its extra arguments
    (its ``add_<command>_arguments(parser)``, when it defines one): listing the commands
    needs only their help texts."""
    parser = argparse.ArgumentParser(prog="ovstream", description="OpenViking context engine for OpenClaw")
    parser.add_argument("--config", help="TOML config file (default: $OVSTREAM_CONFIG or config/ovstream.toml)")
    parser.add_argument(
        "--log-level",
        default=None,
        help="logging level (default: INFO for a service, WARNING for an operator's command)",
    )
    parser.add_argument("--version", action="version", version=f"ovstream {installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (target, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name != command:
            continue
        try:
            module = importlib.import_module(target.split(":")[0])
        except ImportError:
            continue  # main() says it is not available
        add_args = getattr(module, f"add_{name.replace('-', '_')}_arguments", None)
        if add_args is not None:
            add_args(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``ovstream``: its output piped into a reader that stops early (``| head``) ends quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader went away: nothing left to say, and Python's own flush at exit must not
        # say "Exception ignored ... BrokenPipeError" either
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_in(words))
    args = parser.parse_args(words)
    if not args.command:
        parser.print_help()
        return 2
    if args.log_level is None:
        args.log_level = "INFO" if args.command in SERVICES else "WARNING"
    logs.configure(args.command, level=args.log_level)
    if args.command in SERVICES:  # `kill -USR1 <pid>`: every thread's stack to the log, the process goes on
        with contextlib.suppress(ValueError, OSError):  # called in-process (tests): stderr has no file
            faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        settings: Settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"ovstream: {exc}", file=sys.stderr)
        return 2
    if settings.log_format == "json":
        logs.configure(args.command, level=args.log_level, json_lines=True)
    try:
        func = _resolve(COMMANDS[args.command][0])
    except (ImportError, AttributeError) as exc:
        print(f"ovstream {args.command}: not available: {exc}", file=sys.stderr)
        return 2
    try:
        return int(func(settings, args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not redis_went_away(exc):
            raise
        # an operator's command with Redis away: one line that says so, not redis-py's traceback
        print(f"ovstream {args.command}: Redis unreachable at {settings.redacted_redis_url()}: {exc}", file=sys.stderr)
        return 1
