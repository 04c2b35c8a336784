"""Archive tools: ov_archive_search (grep the archived originals) and ov_archive_expand."""

from __future__ import annotations

import json
import re

import msgspec

from core.ov.client import OVError
from core.ov.layout import ARCHIVE_ID, history_uri
from core.ov.messages import ContextPart, OtherPart, OVMessage, TextPart, ToolPart
from workers.rpc.context import Caller, RpcError, Services
from workers.rpc.models import ArchiveExpandParams, ArchiveSearchParams
from workers.rpc.tools.base import Tool, ToolResult, text_result

MAX_MATCHES_SHOWN = 12
MAX_MATCH_CHARS = 1500


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MATCH_CHARS else text[:MAX_MATCH_CHARS] + "…(truncated)"


async def ov_archive_search(svc: Services, caller: Caller, p: ArchiveSearchParams) -> ToolResult:
    ov_sid = caller.require_session()
    # A literal search: the model gives words, not regexes, and OV greps with Python's re.
    pattern = re.escape(p.query)
    try:
        result = await svc.ov_for(caller).grep(history_uri(ov_sid, p.archiveId), pattern, case_insensitive=True)
        # OV also greps each archive's memory_diff.json (it quotes extracted memories);
        # only messages.jsonl holds what was said.
        matches = [m for m in result.matches if m.uri.endswith("/messages.jsonl")]
    except OVError as exc:
        if exc.code != "NOT_FOUND":
            raise
        matches = []  # no archive yet: nothing to find, not an error
    if not matches:
        return text_result(
            f'No matches for "{p.query}" in the archived messages. The original wording may differ: '
            "try a synonym, a related term or a shorter fragment.",
            query=p.query,
            matchCount=0,
        )
    shown = matches[:MAX_MATCHES_SHOWN]
    blocks = []
    for i, m in enumerate(shown, 1):
        tag = ARCHIVE_ID.search(m.uri)
        blocks.append(f"## Match {i}: {tag.group(0) if tag else 'archive'} (line {m.line})\n{_clip(m.content)}")
    more = f" (showing the first {MAX_MATCHES_SHOWN})" if len(matches) > MAX_MATCHES_SHOWN else ""
    header = f'Found {len(matches)} match(es) for "{p.query}"{more}:'
    return text_result(header + "\n\n" + "\n\n".join(blocks), query=p.query, matchCount=len(matches))


def format_ov_message(message: OVMessage) -> str:
    """One archived OV message as readable text: ``[role]:`` then its parts."""
    sections: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                sections.append(part.text)
        elif isinstance(part, ToolPart):
            lines = [f"[Tool: {part.tool_name or 'unknown'}] ({part.tool_status or 'unknown'})"]
            if part.tool_input:
                lines.append("Input: " + json.dumps(part.tool_input, ensure_ascii=False, indent=2))
            if part.tool_output:
                lines.append(f"Output:\n{part.tool_output}")
            sections.append("\n".join(lines))
        elif isinstance(part, ContextPart):
            abstract = f" {part.abstract}" if part.abstract else ""
            sections.append(f"[Context: {part.uri or '?'}]{abstract}")
        elif isinstance(part, OtherPart):  # a kind OV 0.5.2 does not write: as the reference shows it
            sections.append(part.rendered)
        else:  # an image: said as OV stores it
            sections.append(f"[image_url]: {msgspec.json.encode(part).decode()}")
    return f"[{message.role or 'unknown'}]:\n" + ("\n\n".join(sections) if sections else "(empty)")


async def ov_archive_expand(svc: Services, caller: Caller, p: ArchiveExpandParams) -> ToolResult:
    ov_sid = caller.require_session()
    try:
        archive = await svc.ov_for(caller).get_archive(ov_sid, p.archiveId)
    except OVError as exc:
        if exc.code == "NOT_FOUND":
            raise RpcError(
                404, "archive_not_found", f"no finished archive {p.archiveId} in this session", "params.archiveId"
            ) from None
        raise
    header = [f"## {archive.archive_id or p.archiveId}"]
    if archive.abstract:
        header.append(f"**Summary**: {archive.abstract}")
    header.append(f"**Messages**: {len(archive.messages)}")
    body = "\n\n".join(format_ov_message(m) for m in archive.messages)
    return text_result(
        "\n".join(header) + "\n\n" + body,
        action="expanded",
        archiveId=archive.archive_id or p.archiveId,
        messageCount=len(archive.messages),
        ovSessionId=ov_sid,
    )


TOOLS = [
    Tool(
        "ov_archive_search",
        ArchiveSearchParams,
        ov_archive_search,
        "Keyword search over this session's archived original messages.",
    ),
    Tool(
        "ov_archive_expand",
        ArchiveExpandParams,
        ov_archive_expand,
        "List the original messages of one archive of this session.",
    ),
]
