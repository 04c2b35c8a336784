"""OV 0.5.2's answer envelope ``{"status", "result", "error"}`` and the errors it stands for."""

from __future__ import annotations

import re
from typing import Any, TypeVar, cast

import httpx
import msgspec

from core.ov.models import to_struct

T = TypeVar("T", bound=msgspec.Struct)

_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
_CODE_BY_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class OVError(Exception):
    """OV answered with an error, or did not answer (``status`` 0, code "UNAVAILABLE").

    ``added`` is set by ``add_messages`` when a later chunk failed: how many
    messages the earlier chunks stored.
    """

    def __init__(self, code: str, message: str, *, status: int = 0, details: Any = None) -> None:
        super().__init__(f"{code} (HTTP {status}): {message}" if status else f"{code}: {message}")
        self.code = code
        self.status = status
        self.message = message
        self.details = details
        self.added = 0
        self.in_flight = False
        """The request may still be in OV's hands (no answer came: a read timeout, a dropped
        connection); an answer, or a connection never made, says it is not."""


class OVUnavailable(OVError):
    """OV is down or overloaded (connection error, timeout, HTTP 502/503/504): try later."""


class OVRefused(OVUnavailable):
    """OV refuses ovstream's credentials (HTTP 401): a deployment fault, as OV being away is.
    Nothing a turn or a commit did: wait (capture dead-letters nothing) until the key is
    mended, and say what to set."""


REFUSED_HINT = (
    "OV refuses ovstream's API key: set apiKey (OVSTREAM_API_KEY), or userApiKeys for the tenant, "
    "to a user key of this OV (docs: deploy/README.md, OV in API-key mode)"
)


def error_for(code: str, message: str, *, status: int, details: Any = None) -> OVError:
    """The error an answer with ``status`` stands for (``OVUnavailable`` for 502/503/504,
    ``OVRefused`` for 401)."""
    if status == 401:
        return OVRefused(code, f"{message}; {REFUSED_HINT}", status=status, details=details)
    cls = OVUnavailable if status in _UNAVAILABLE_STATUSES else OVError
    return cls(code, message, status=status, details=details)


_JSON_DECODE_ERROR = re.compile(r": line \d+ column \d+ \(char \d+\)")
"""How Python's ``json.JSONDecodeError`` ends its message ("Expecting value: line 1 column 1
(char 0)")."""


def is_passing(err: OVError) -> bool:
    """Trouble of OV's own that a later try gets past: OV away (``OVUnavailable``), a server
    error (5xx), or OV 0.5.2 reading one of its own files while another write rewrites it. That
    last one is a 400: OV maps the ``JSONDecodeError`` of its session's ``.meta.json``, read
    empty mid-write, to INVALID_ARGUMENT (``Session._load_meta``, ``error_mapping``;
    docs/OV-NOTES.md). Nothing ovstream sends is parsed so (a bad body is FastAPI's 422)."""
    if isinstance(err, OVUnavailable) or err.status >= 500:
        return True
    return err.status == 400 and _JSON_DECODE_ERROR.search(err.message) is not None


def object_result(result: Any) -> dict[str, Any]:
    """A result the 0.5.2 contract documents as a JSON object (not re-validated here)."""
    return cast(dict[str, Any], result)


def decode_result(result: Any, type_: type[T]) -> T:
    try:
        return to_struct(result, type_)
    except msgspec.ValidationError as exc:
        raise OVError("BAD_RESPONSE", f"unexpected {type_.__name__} shape: {exc}", status=200) from exc


def unwrap(resp: httpx.Response, *, raw: bool = False) -> Any:
    """The envelope's result, or the OVError its error (or a non-JSON answer) stands for."""
    status = resp.status_code
    try:
        body = resp.json()
    except RecursionError:
        raise error_for("BAD_RESPONSE", "answer nested too deeply to decode", status=status) from None
    except ValueError:  # a proxy's 502/503/504 page still means "OV down"
        code = "UNAVAILABLE" if status in _UNAVAILABLE_STATUSES else "BAD_RESPONSE"
        raise error_for(code, f"non-JSON answer: {resp.text[:200]!r}", status=status) from None
    if isinstance(body, dict) and body.get("status") == "error":
        raw_err = body.get("error")
        err: dict[str, Any] = raw_err if isinstance(raw_err, dict) else {}
        code = err.get("code") or _CODE_BY_STATUS.get(status, "UNKNOWN")
        raise error_for(code, str(err.get("message") or ""), status=status, details=err.get("details"))
    if status >= 400:
        detail = body.get("detail", body) if isinstance(body, dict) else body
        raise error_for(_CODE_BY_STATUS.get(status, "UNKNOWN"), str(detail)[:500], status=status)
    if raw:
        return body
    if not isinstance(body, dict) or body.get("status") != "ok":
        raise OVError("BAD_RESPONSE", f"no OV envelope in answer: {str(body)[:200]}", status=status)
    return body.get("result")
