"""Deterministic answers to OpenViking's LLM prompts (used by workers.model_server)."""

from __future__ import annotations

from typing import Any


def _text(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return "\n".join(out)


def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, str, list]:
    """-> (kind, content, [(tool_name, arguments)])."""
    return "other", "OK.", []
