"""Request and response models of the RPC; OpenAPI documents them all.

Field names are OpenClaw's camelCase. assemble's request is a msgspec struct
decoded straight from the body bytes (it is the hot path and carries whole
transcripts); everything else is pydantic. ``messages`` stays a list of raw
objects: core.messages.model does the typed conversion where one is needed.
Unknown request fields are ignored, because OpenClaw passes more than we read
(sessionFile, compactionTarget, ...).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, model_validator

from core.events import TurnEvent
from core.uris import normalize_uri
from workers.rpc.context import RpcError

SESSION_ID_MAX = 1024
"""Longest sessionId / sessionKey accepted; real ones are a UUID or a short key."""

_REQUEST = ConfigDict(extra="ignore", populate_by_name=True)
_RESPONSE = ConfigDict(extra="allow")

# --- identity shared by every call ----------------------------------------------------


class _SessionRef(BaseModel):
    model_config = _REQUEST

    sessionKey: str | None = Field(None, max_length=SESSION_ID_MAX)
    runtimeContext: dict[str, Any] | None = Field(
        None, description="OpenClaw's runtime context; agentId and sessionKey are read from it."
    )


# --- assemble ----------------------------------------------------------------------------


class AssembleRequest(msgspec.Struct, forbid_unknown_fields=False):
    """assemble's body. A msgspec struct, not pydantic: decoding a 200-message
    transcript straight from the bytes costs a fraction of json + pydantic, and
    this is the hot path. ``decode_assemble_request`` turns errors into 4xx."""

    sessionId: Annotated[str, msgspec.Meta(min_length=1, max_length=SESSION_ID_MAX)]
    messages: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """OpenClaw AgentMessages, as OpenClaw holds them. Left out by the plugin on the main
    call when it sends its turns: assemble then builds the context from the snapshot and
    those turns, and the transcript would be 100s of KiB decoded for nothing."""
    messageCount: Annotated[int, msgspec.Meta(ge=0)] | None = None
    """How many messages the host passed, sent in place of ``messages`` (only then)."""
    sessionKey: Annotated[str, msgspec.Meta(max_length=SESSION_ID_MAX)] | None = None
    tokenBudget: float | None = None
    """Model context window; missing or <= 0: 128000."""
    runtimeContext: dict[str, Any] | None = None
    """OpenClaw's runtime context; agentId and sessionKey are read from it."""
    # Present (even as null) only on OpenClaw's main call: UNSET tells absence apart.
    prompt: str | msgspec.UnsetType | None = msgspec.UNSET
    availableTools: Any = msgspec.UNSET
    citationsMode: Any = msgspec.UNSET
    model: Any = None
    heldTurns: list[TurnEvent] | None = None
    """Turn events the plugin has not got into Redis yet (Redis away): certainly not in OV.
    With ``recentTurns`` present (even empty) the lag overlay goes by event identity."""
    recentTurns: list[TurnEvent] | None = None
    """Turn events the plugin published recently; those the snapshot lacks are appended."""
    forked: bool = False
    """The session is a subagent forked from its parent (``prepareSubagentSpawn``): its
    context starts from the parent's at the spawn (core.fork). Sent with ``messages``."""

    def transcript_length(self) -> int:
        """How many messages the host passed, whether they were sent or only counted."""
        return len(self.messages) if self.messageCount is None else self.messageCount

    def overlay_by_identity(self) -> bool:
        """A plugin that sends its turns: the overlay ignores what the host passes as messages."""
        return self.heldTurns is not None or self.recentTurns is not None

    def is_main_call(self) -> bool:
        """OpenClaw's main assemble carries prompt/availableTools/citationsMode;
        its per-LLM-call transform-context hook sends none of those keys."""
        return (
            self.prompt is not msgspec.UNSET
            or self.availableTools is not msgspec.UNSET
            or self.citationsMode is not msgspec.UNSET
        )


_assemble_decoder = msgspec.json.Decoder(AssembleRequest)
_AT_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")


def decode_assemble_request(raw: bytes) -> AssembleRequest:
    """The body as an AssembleRequest, or an RpcError naming the bad field (a RecursionError
    for a body nested too deeply: the app answers it 400, like one anywhere else)."""
    try:
        request: AssembleRequest = _assemble_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _AT_PATH.search(text)
        if match is None:  # the body itself is wrong (not an object, a required key missing)
            missing = re.search(r"missing required field `(\w+)`", text)
            if missing:
                field = missing.group(1)
                raise RpcError(422, "invalid_request", f"{field}: field required", field) from None
            raise RpcError(400, "invalid_body", f"the body must be a JSON object ({text})") from None
        field = match.group("path") or "body"
        raise RpcError(422, "invalid_request", f"{field}: {text[: match.start()]}", field) from None
    except msgspec.DecodeError as exc:
        raise RpcError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    if request.messageCount is not None:
        _check_counted_transcript(request)
    return request


def _check_counted_transcript(request: AssembleRequest) -> None:
    """A transcript sent as its count only where assemble never reads it: the main call
    of a plugin that sends its turns (any other call answers from the messages)."""
    if request.messages:
        raise RpcError(422, "invalid_request", "messageCount: sent in place of messages, not with them", "messageCount")
    if request.forked:
        raise RpcError(422, "invalid_request", "messageCount: a forked session's assemble reads its messages", "forked")
    if not (request.overlay_by_identity() and request.is_main_call()):
        raise RpcError(
            422,
            "invalid_request",
            "messageCount: only on the main call (prompt) with heldTurns or recentTurns; otherwise send messages",
            "messageCount",
        )


def assemble_request_schema() -> dict[str, Any]:
    """JSON schema of AssembleRequest, for the OpenAPI spec."""
    schema: dict[str, Any] = msgspec.json.schema(AssembleRequest)["$defs"]["AssembleRequest"]
    return schema


class AssembleResponse(BaseModel):
    model_config = _RESPONSE

    messages: list[dict[str, Any]]
    estimatedTokens: int
    systemPromptAddition: str | None = None


# --- compact -------------------------------------------------------------------------------


class CompactRequest(_SessionRef):
    sessionId: str = Field(..., min_length=1, max_length=SESSION_ID_MAX)
    tokenBudget: float | None = Field(None, allow_inf_nan=False)
    currentTokenCount: float | None = Field(None, allow_inf_nan=False)
    force: bool | None = None


class CompactResult(BaseModel):
    model_config = _RESPONSE

    summary: str = ""
    firstKeptEntryId: str = ""
    tokensBefore: int
    tokensAfter: int | None = None
    details: dict[str, Any] | None = None


class CompactResponse(BaseModel):
    model_config = _RESPONSE

    ok: bool
    compacted: bool
    reason: str | None = None
    result: CompactResult | None = None


# --- tools ---------------------------------------------------------------------------------


class ToolRequest(_SessionRef):
    sessionId: str | None = Field(None, max_length=SESSION_ID_MAX)
    params: dict[str, Any] = Field(default_factory=dict, description="The tool's own parameters.")


class TextContent(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolResponse(BaseModel):
    model_config = _RESPONSE

    content: list[TextContent]
    details: dict[str, Any] = Field(default_factory=dict)


# Tool parameters. Each tool validates its ``params`` with one of these, so an
# error names the field (``params.query``).

# Parameters reach OV exactly as sent (a SKILL.md or an uploaded file keeps its
# indentation and trailing newline): nothing is stripped; text that must say
# something is checked for it without being changed.
_PARAMS = ConfigDict(extra="ignore", populate_by_name=True)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


NonBlank = Annotated[str, AfterValidator(_not_blank)]
VikingUri = Annotated[str, AfterValidator(normalize_uri)]
"""A viking:// URI in its canonical form (core.uris): what is checked is what OV gets."""
_QUERY = Field(..., min_length=1, max_length=4000)
_LIMIT = Field(None, ge=1, le=100)
_SCORE = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
# No leading dot, so an id can never be "." or ".." in a URL path.
_ARCHIVE_ID = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$"
_URI = Field(None, min_length=1, max_length=2048, pattern=r"^viking://")


class MemoryRecallParams(BaseModel):
    model_config = _PARAMS
    query: NonBlank = _QUERY
    limit: int | None = _LIMIT
    scoreThreshold: float | None = _SCORE
    targetUri: VikingUri | None = _URI
    includeResources: bool | None = None


class MemoryStoreParams(BaseModel):
    model_config = _PARAMS
    text: NonBlank = Field(..., min_length=1, max_length=200_000)
    role: Literal["user", "assistant"] = "user"
    sessionId: str | None = Field(None, min_length=1, max_length=SESSION_ID_MAX)


class MemoryForgetParams(BaseModel):
    model_config = _PARAMS
    uri: VikingUri | None = _URI
    query: NonBlank | None = Field(None, min_length=1, max_length=4000)
    targetUri: VikingUri | None = _URI
    limit: int | None = _LIMIT
    scoreThreshold: float | None = _SCORE

    @model_validator(mode="after")
    def _uri_or_query(self) -> MemoryForgetParams:
        if not self.uri and not self.query:
            raise ValueError("give uri or query")
        return self


class AddResourceParams(BaseModel):
    model_config = _PARAMS
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        validation_alias=AliasChoices("path", "source"),
        description="A URL, or a file path readable by the server process.",
    )
    content: str | None = Field(None, max_length=32 * 1024 * 1024, description="Text to upload as a file.")
    filename: str | None = Field(None, min_length=1, max_length=255, pattern=r"^[^/\\\x00]+$")
    to: VikingUri | None = _URI
    reason: str | None = Field(None, max_length=2000)
    wait: bool | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AddResourceParams:
        if self.path and self.content is not None:
            raise ValueError("give path or content+filename, not both")
        if not self.path and self.content is None:
            raise ValueError("give path, or content with filename")
        if self.content is not None and not self.filename:
            raise ValueError("content needs a filename")
        return self


class AddSkillParams(BaseModel):
    model_config = _PARAMS
    content: NonBlank | None = Field(
        None,
        min_length=1,
        max_length=4 * 1024 * 1024,
        validation_alias=AliasChoices("content", "data"),
        description="SKILL.md text.",
    )
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        validation_alias=AliasChoices("path", "source"),
        description="A SKILL.md file (or a directory holding one) readable by the server process.",
    )
    wait: bool | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AddSkillParams:
        if bool(self.content) == bool(self.path):
            raise ValueError("give exactly one of content or path")
        return self


class MemorySearchParams(BaseModel):
    model_config = _PARAMS
    query: NonBlank = _QUERY
    limit: int | None = _LIMIT
    uri: VikingUri | None = _URI


class ArchiveSearchParams(BaseModel):
    model_config = _PARAMS
    query: NonBlank = Field(..., min_length=1, max_length=1000)
    archiveId: str | None = Field(None, pattern=_ARCHIVE_ID)


class ArchiveExpandParams(BaseModel):
    model_config = _PARAMS
    archiveId: str = Field(..., pattern=_ARCHIVE_ID)


# --- errors and health -------------------------------------------------------------------------


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class HealthResponse(BaseModel):
    model_config = _RESPONSE

    status: Literal["ok", "degraded", "down"]
    redis: str
    ov: str


# --- subagents ---------------------------------------------------------------------------

SubagentEndReason = Literal["deleted", "completed", "swept", "released"]


class SubagentSpawn(BaseModel):
    """``prepareSubagentSpawn``: a child session is about to start."""

    model_config = _REQUEST

    parentSessionKey: str = Field(..., min_length=1, max_length=SESSION_ID_MAX)
    childSessionKey: str = Field(..., min_length=1, max_length=SESSION_ID_MAX)
    contextMode: Literal["isolated", "fork"] = "isolated"
    parentSessionId: str | None = Field(None, max_length=SESSION_ID_MAX)
    childSessionId: str | None = Field(None, max_length=SESSION_ID_MAX)
    ttlMs: int | None = Field(None, ge=0)


class SubagentRef(BaseModel):
    """A child session: a spawn to roll back."""

    model_config = _REQUEST

    childSessionKey: str = Field(..., min_length=1, max_length=SESSION_ID_MAX)
    childSessionId: str | None = Field(None, max_length=SESSION_ID_MAX)


class SubagentEnded(SubagentRef):
    """``onSubagentEnded``: the child's run is over."""

    reason: SubagentEndReason


class SubagentAnswer(BaseModel):
    model_config = _RESPONSE

    ok: bool
    childSession: str | None = None
    """The child's OV session (None: the child is bypassed, or unknown)."""
    parentSession: str | None = None
    contextMode: str | None = None
    forkBase: bool = False
    """A fork found a parent snapshot to start from."""
