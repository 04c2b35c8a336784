"""``ovstream commits``: a session's commit outcomes, the record of truth (workers.commits.records)."""

from __future__ import annotations

import argparse
import sys

from core.config import Settings
from core.events import CommitOutcome
from core.ids import ov_session_id, resolve_agent_id
from core.session import SessionAddress
from workers.cli.tables import table, when
from workers.commits.records import CommitRecords
from workers.store.connection import connect
from workers.store.keys import Keys
from workers.store.lineage import Lineage, lineage_address, lineage_of, read_lineage_by_id


def add_commits_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_id", help="OpenClaw sessionId")
    parser.add_argument("--session-key", default=None, help="OpenClaw sessionKey")
    parser.add_argument("--agent", default=None, help="runtime agent id (when the key names none)")
    parser.add_argument("--user", default=None, help="tenant label (Settings.user_api_keys)")


def _row(o: CommitOutcome) -> list[str]:
    archive = o.archive_uri.rsplit("/", 1)[-1] if o.archive_uri else "-"
    memories = "-" if o.memories_extracted is None else str(o.memories_extracted)
    error = (o.error or "-").replace("\n", " ")
    return [o.commit_id, o.reason, o.status, when(o.requested_at), when(o.finished_at), memories, archive, error[:80]]


def format_commits(outcomes: list[CommitOutcome]) -> str:
    """The outcomes as a text table, oldest first."""
    header = ["COMMIT", "REASON", "STATUS", "REQUESTED (UTC)", "FINISHED (UTC)", "MEMORIES", "ARCHIVE", "ERROR"]
    return table(header, [_row(o) for o in outcomes])


def format_lineage(lineage: Lineage) -> str:
    """One line: whose subagent the session is, how it was spawned, how its run ended."""
    ended = f", ended {lineage.end_reason} at {when(lineage.ended_at)}" if lineage.ended_at else ", running"
    fork = f", {lineage.fork_at} message(s) copied" if lineage.fork_at is not None else ""
    spawned = f", spawned {when(lineage.prepared_at)}"
    return f"subagent of {lineage.parent} ({lineage.parent_key}): {lineage.mode}{fork}{spawned}{ended}"


def cli_commits(settings: Settings, args: argparse.Namespace) -> int:
    try:
        sid = ov_session_id(args.session_id, args.session_key)
    except ValueError as exc:  # an empty id and no key: say so, no traceback
        print(f"ovstream commits: {exc} (ovstream commits <sessionId> [--session-key KEY])", file=sys.stderr)
        return 2
    agent = resolve_agent_id(args.session_key, args.agent, settings.agent_prefix)
    client = connect(settings)
    records = CommitRecords(client, settings)
    address = SessionAddress(sid, agent, args.user)
    where = lineage_address(args.session_key, address)
    lineage = lineage_of(client.hgetall(Keys(settings.key_prefix).session(where, settings.shards).lineage))
    if lineage is None and args.session_key is None:  # a subagent's lineage lives under its key
        lineage = read_lineage_by_id(client, settings, sid)
    if lineage is not None:
        print(format_lineage(lineage))
    outcomes = records.list(address)
    if not outcomes and args.session_key is None and args.agent is None:
        # the agent is named by the session key, which the operator may not have at hand
        others = [a for a in records.addresses_of(sid) if a != address and a.tenant == address.tenant]
        if others:
            for other in others:
                _print_commits(records, other)
            return 0
    if not outcomes:
        print(f"no commits recorded for session {sid} (agent {agent}; --session-key or --agent name another)")
        return 0
    _print_commits(records, address)
    return 0


def _print_commits(records: CommitRecords, address: SessionAddress) -> None:
    outcomes = records.list(address)
    tenant = f", tenant {address.tenant}" if address.tenant else ""
    print(f"session {address.ov_session_id} (agent {address.agent_id}{tenant}): {len(outcomes)} commit(s)")
    print(format_commits(outcomes))
