"""core.snapshot_growth: when a stored snapshot plus the written messages is OV's /context."""

from __future__ import annotations

import pytest

from core.events import ContextSnapshot
from core.ov.messages import OVMessage, TextPart, ToolPart, text_message
from core.snapshot_growth import SAFE_TOOL_OUTPUT_CHARS, first_records, grown_records

STORED = ContextSnapshot(
    ov_session_id="s",
    agent_id="main",
    messages=[OVMessage(id="m1", role="user", parts=[TextPart(text="hi")])],
    applied_stream_id="5-0",
)
TEXT = text_message("assistant", "hello")


def tool(output: str) -> OVMessage:
    return OVMessage(role="assistant", parts=[ToolPart(tool_id="c", tool_output=output)])


@pytest.mark.parametrize(
    ("stored", "written", "round_start", "added", "active_after", "grows"),
    [
        (STORED, [TEXT], "5-0", 1, 2, True),
        (STORED, [TEXT, tool("ok")], "5-0", 2, 3, True),
        (None, [TEXT], "5-0", 1, 2, False),  # no snapshot yet
        (STORED, [TEXT], None, 1, 2, False),  # the session's first round
        (STORED, [TEXT], "4-0", 1, 2, False),  # the snapshot lags behind the round's start
        (STORED, [TEXT], "5-0", 1, 3, False),  # OV holds more than the snapshot knows of
        (STORED, [TEXT], "5-0", 1, 1, False),  # a commit archived messages meanwhile
        (STORED, [TEXT], "5-0", 0, 1, False),  # OV added fewer than written
        (STORED, [tool("x" * SAFE_TOOL_OUTPUT_CHARS)], "5-0", 1, 2, False),  # OV may stub it
    ],
    ids=[
        "text",
        "text-and-tool",
        "no-snapshot",
        "first-round",
        "snapshot-behind",
        "ov-has-more",
        "commit-between",
        "fewer-added",
        "long-tool-output",
    ],
)
def test_grown_records(
    stored: ContextSnapshot | None,
    written: list[OVMessage],
    round_start: str | None,
    added: int,
    active_after: int,
    grows: bool,
) -> None:
    records = grown_records(stored, written, round_start=round_start, added=added, active_after=active_after)
    if not grows:
        assert records is None
        return
    assert stored is not None and records == [*stored.messages, *written]


@pytest.mark.parametrize(
    ("written", "ov_total_before", "added", "active_after", "known"),
    [
        ([TEXT], 0, 1, 1, True),
        ([TEXT, tool("ok")], 0, 2, 2, True),
        ([TEXT], None, 1, 1, False),  # OV's count before the round not known
        ([TEXT], 3, 1, 1, False),  # OV held messages (archived, say): only /context knows them
        ([TEXT], 0, 1, 2, False),  # OV holds more than this round wrote
        ([TEXT, TEXT], 0, 1, 1, False),  # OV added fewer than written
        ([tool("x" * SAFE_TOOL_OUTPUT_CHARS)], 0, 1, 1, False),  # OV may stub it
    ],
    ids=["text", "text-and-tool", "count-unknown", "ov-had-messages", "ov-has-more", "fewer-added", "long-output"],
)
def test_first_records(
    written: list[OVMessage], ov_total_before: int | None, added: int, active_after: int, known: bool
) -> None:
    records = first_records(written, ov_total_before=ov_total_before, added=added, active_after=active_after)
    assert records == (list(written) if known else None)
