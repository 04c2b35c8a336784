"""What every agent tool is made of: the ``Tool`` record and the OpenClaw result shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from workers.rpc.context import Caller, Services

ToolResult = dict[str, Any]
ToolFunc = Callable[[Services, Caller, Any], Awaitable[ToolResult]]


def text_result(text: str, **details: Any) -> ToolResult:
    """The ``{content: [{type: "text", text}], details}`` shape OpenClaw tools return."""
    return {"content": [{"type": "text", "text": text}], "details": details}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    params: type[BaseModel]
    run: ToolFunc
    description: str
