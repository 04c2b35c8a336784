"""OV's message records, as one typed shape (OpenViking 0.5.2).

The same structs cross every boundary an OV message crosses: capture builds them
from a turn (``core.messages.convert.turn_to_ov_messages``) and sends them to OV,
OV's ``/context`` and archives answer with them, the snapshot in Redis stores them
and assemble converts them back to OpenClaw messages. Encoded, a record is the JSON
OV takes and gives (``{id, role, parts, created_at}`` and maybe ``peer_id, turn_id``):
fields left at their default are not written, and fields OV adds are ignored when
read. A part is one of OV's four kinds, told apart by ``type``; a part of any other kind
(a later OV may add one) is kept as an ``OtherPart`` carrying its kind and its JSON, so one
unknown part never takes a whole archive or session with it (``known_parts``, applied where
OV's JSON comes in).
"""

from __future__ import annotations

from typing import Any

import msgspec

_PART: dict[str, Any] = {"tag_field": "type", "kw_only": True, "omit_defaults": True, "forbid_unknown_fields": False}


class TextPart(msgspec.Struct, tag="text", **_PART):
    text: str = ""


class ContextPart(msgspec.Struct, tag="context", **_PART):
    """A memory, resource or skill the message refers to: its URI and abstract."""

    uri: str = ""
    context_type: str = "memory"
    abstract: str = ""


class ImagePart(msgspec.Struct, tag="image_url", **_PART):
    """OV stores an image as ``{"type": "image_url", "image_url": {"url", "detail"}}``."""

    image_url: Any = None


class ToolPart(msgspec.Struct, tag="tool", **_PART):
    """One tool call and its result. OV may externalize a long output: it then keeps a
    preview in ``tool_output`` and says where the rest is in ``tool_output_ref``."""

    tool_id: str = ""
    tool_name: str = ""
    tool_input: Any = None
    """A JSON object as OV stores it; older writers sent a JSON string."""
    tool_output: str = ""
    tool_status: str = ""
    tool_output_ref: str = ""
    tool_output_original_chars: int | None = None


class OtherPart(msgspec.Struct, tag="other", **_PART):
    """A part of a kind OV 0.5.2 does not write: its ``type`` as OV gave it and the whole
    part as JSON text, shown as the reference plugin shows it (``[kind]: {json}``)."""

    kind: str = ""
    json: str = ""

    @property
    def rendered(self) -> str:
        return f"[{self.kind}]: {self.json}"


Part = TextPart | ContextPart | ImagePart | ToolPart | OtherPart

KNOWN_KINDS = frozenset({"text", "context", "image_url", "tool"})
"""The part kinds OV 0.5.2 writes (``OtherPart``'s own tag is not one: OV never sends it)."""


class OVMessage(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=False):
    """One OV session message: a record of ``/context`` or an archive, or a body to write."""

    role: str
    """``user`` or ``assistant``."""
    parts: list[Part] = msgspec.field(default_factory=list)
    id: str = ""
    """OV's id; empty on a body not yet written."""
    created_at: str | None = None
    peer_id: str | None = None
    """The agent that spoke an assistant message (OV files its memories under this peer)."""
    turn_id: str | None = None

    @property
    def text(self) -> str:
        """The text parts, joined by newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))


def text_message(role: str, text: str) -> OVMessage:
    """A message of one text part."""
    return OVMessage(role=role, parts=[TextPart(text=text)])


def known_parts(messages: Any) -> Any:
    """OV's decoded message JSON with every part of a kind not in ``KNOWN_KINDS`` replaced by
    an ``OtherPart``'s JSON (the rest as it was; anything not shaped as a list of messages is
    left for the decode to refuse)."""
    if not isinstance(messages, list):
        return messages
    return [_known_parts_of(m) for m in messages]


def _known_parts_of(message: Any) -> Any:
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list) or all(_known(p) for p in parts):
        return message
    return {**message, "parts": [p if _known(p) else _other(p) for p in parts]}


def _known(part: Any) -> bool:
    """Not to be replaced: a known kind, or no part at all (not an object, a ``type`` that is
    no string): the decode refuses those."""
    kind = part.get("type") if isinstance(part, dict) else None
    return not isinstance(kind, str) or kind in KNOWN_KINDS


def _other(part: dict[str, Any]) -> dict[str, Any]:
    return {"type": "other", "kind": part["type"], "json": msgspec.json.encode(part).decode()}


def to_records(messages: Any) -> list[OVMessage]:
    """OV message records from decoded JSON (a list of objects): at the edges where JSON
    comes in untyped; ``msgspec.ValidationError`` on a bad shape."""
    return msgspec.convert(known_parts(messages if messages is not None else []), list[OVMessage], strict=False)


def to_json(messages: list[OVMessage]) -> list[dict[str, Any]]:
    """The JSON objects OV takes for ``messages`` (what is sent over HTTP)."""
    return msgspec.to_builtins(messages)  # type: ignore[no-any-return]
