"""How ``ovstream demo`` prints what assemble returns (pure text formatting)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from core.events import CommitOutcome
from core.messages.convert import ARCHIVE_SUMMARY_HEADER
from core.recall.text import latest_user_index, message_text

RECALL_OPEN = "<relevant-memories>"
RECALL_CLOSE = "</relevant-memories>"
LINE_CHARS = 100
BLOCK_LINES = 40
SUMMARY_LINES = 80
_SPACES = re.compile(r"\s+")


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``limit`` characters."""
    flat = _SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def message_summary(message: Mapping[str, Any]) -> str:
    """``role  first ~100 chars`` of one OpenClaw message (tool calls and results named)."""
    role = str(message.get("role", "?"))
    text = message_text(message)
    if text.startswith(ARCHIVE_SUMMARY_HEADER):  # as the report shows it above: no template lines
        text = f"{ARCHIVE_SUMMARY_HEADER} {readable_summary(text)}"
    if not text:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        kinds = [str(b.get("name") or b.get("type")) for b in blocks if isinstance(b, Mapping)]
        if role == "toolResult":
            text = f"(result of {message.get('toolName', 'a tool')})"
        elif kinds:
            text = "(" + ", ".join(kinds) + ")"
    return f"{role:<10} {one_line(text)}"


def indent(text: str, prefix: str = "    | ", max_lines: int = BLOCK_LINES) -> str:
    lines = text.splitlines() or [""]
    shown = lines[:max_lines]
    if len(lines) > max_lines:
        shown.append(f"… ({len(lines) - max_lines} more lines)")
    return "\n".join(prefix + line for line in shown)


class Progress:
    """One status line: rewritten in place on a terminal; elsewhere (a log file, CI) written
    only when what it says changes, not every second."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.in_place = self.stream.isatty()
        self.shown: str | None = None
        self.open = False

    def update(self, line: str, state: str) -> None:
        """Show ``line``; ``state`` is what it says without the clock (the change that counts)."""
        if self.in_place:
            self.stream.write("\r\033[K" + line)
            self.open = True
        elif state != self.shown:
            self.stream.write(line + "\n")
        self.shown = state
        self.stream.flush()

    def end(self) -> None:
        """Leave the line as it is (the next output starts on a line of its own)."""
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
        self.open, self.shown = False, None


_TEMPLATE_LINE = re.compile(r"^_[^_].*_$")


def readable_summary(text: str) -> str:
    """The archive summary as a person reads it: without its ``[Session History Summary]``
    header (the report names it) and without the working-memory template's italic section
    descriptions (OV asks the model to keep them so archives stay machine-detectable)."""
    lines = text.splitlines()
    if lines and lines[0].strip() == ARCHIVE_SUMMARY_HEADER:
        lines = lines[1:]
    kept = [
        line
        for i, line in enumerate(lines)
        if not (_TEMPLATE_LINE.match(line.strip()) and i > 0 and lines[i - 1].startswith("## "))
    ]
    return "\n".join(kept).strip()


def summary_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``[Session History Summary]`` message's text, if the answer has one."""
    for message in messages:
        text = message_text(message)
        if text.startswith(ARCHIVE_SUMMARY_HEADER):
            return text
    return None


def recall_block(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``<relevant-memories>`` block injected into the latest user message, if any."""
    index = latest_user_index(messages)
    if index is None:
        return None
    text = message_text(messages[index])
    start = text.find(RECALL_OPEN)
    end = text.find(RECALL_CLOSE, start)
    if start < 0 or end < 0:
        return None
    return text[start : end + len(RECALL_CLOSE)]


def memory_count(block: str) -> int:
    """Memories listed in a ``<relevant-memories>`` block (one ``<uri>`` each)."""
    return block.count("<uri>") or sum(1 for line in block.splitlines() if line.startswith("- "))


def format_assemble(title: str, body: Mapping[str, Any]) -> str:
    """A main assemble answer: estimate, systemPromptAddition, summary, one line per message."""
    messages = list(body.get("messages") or [])
    out = [f"== {title} ==", f"estimatedTokens: {body.get('estimatedTokens')}"]
    addition = body.get("systemPromptAddition")
    if addition:
        out += ["systemPromptAddition:", indent(str(addition))]
    else:
        out.append("systemPromptAddition: (none)")
    summary = summary_text(messages)
    if summary is not None:
        out += [
            f"{ARCHIVE_SUMMARY_HEADER}: the archived turns as OV's phase 2 summarised them"
            " (shown without the template's section descriptions):",
            indent(readable_summary(summary), max_lines=SUMMARY_LINES),
        ]
    else:
        out.append(f"{ARCHIVE_SUMMARY_HEADER}: (none in this answer)")
    out.append(f"messages ({len(messages)}):")
    out += [f"  {i:>2}. {message_summary(m)}" for i, m in enumerate(messages, 1)]
    return "\n".join(out)


def format_recall(title: str, body: Mapping[str, Any]) -> str:
    """An auto-recall (transform-context) answer: the injected block, or that there was none."""
    messages = list(body.get("messages") or [])
    block = recall_block(messages)
    out = [f"== {title} ==", f"estimatedTokens: {body.get('estimatedTokens')}"]
    if block is None:
        out.append("no <relevant-memories> block: no memory scored above recallScoreThreshold (or none was extracted)")
    else:
        out += ["injected into the latest user message:", indent(block)]
    out.append(f"messages ({len(messages)}):")
    out += [f"  {i:>2}. {message_summary(m)}" for i, m in enumerate(messages, 1)]
    return "\n".join(out)


def format_outcomes(outcomes: Sequence[CommitOutcome]) -> str:
    """The recorded commit outcomes as ``ovstream commits`` prints them."""
    from workers.cli.commits import format_commits

    if not outcomes:
        return "(no commit recorded)"
    return format_commits(list(outcomes))
