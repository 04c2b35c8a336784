"""The OV version ovstream speaks, and what to make of the version a server reports.

Every OV rule ovstream relies on is written against one OpenViking release (the client's
routes and envelope, ``core.ov.tasks``' task states, ``core.ov.layout`` (where OV keeps
memories and archives), the token estimate of ``core.messages.tokens``, OV's merge of one
user's overlapping phase 2s (docs/OV-NOTES.md)): ``SPOKEN``, documented in docs/OV-NOTES.md
and pinned by the contract tests
(``tests/integration``). A server of another minor release may have moved any of them, so a
process refuses to start against one (``ovVersionCheck = "refuse"``, the default) or says
so once and goes on (``"warn"``). Patch releases keep the API: they pass.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Literal

from core.config import Settings
from core.ov.client import OVClient, OVError

log = logging.getLogger(__name__)

SPOKEN = "0.5.2"
"""The OpenViking release this client and its rules are written against."""

START_CHECK_TIMEOUT_S = 5.0
"""How long a starting process waits for OV's ``/health`` before starting without the check."""

VersionLevel = Literal["ok", "warn", "refuse"]
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class VersionVerdict:
    """What a reported version means: ``ok``, ``warn`` (go on, said once) or ``refuse``."""

    level: VersionLevel
    message: str


def _release(version: str) -> tuple[int, int] | None:
    found = _RELEASE.match(version.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def judge_version(reported: object, *, strict: bool = True, spoken: str = SPOKEN) -> VersionVerdict:
    """The verdict on the version an OV server reports in ``GET /health`` (``reported`` is
    that field, whatever its type). ``strict``: another minor release is refused, not warned of."""
    if not isinstance(reported, str) or _release(reported) is None:
        return VersionVerdict(
            "warn", f"OV did not report a version ovstream can read ({reported!r}); it speaks {spoken}"
        )
    if _release(reported) == _release(spoken):
        return VersionVerdict("ok", f"OV {reported} (ovstream speaks {spoken})")
    message = (
        f"OV reports version {reported}, ovstream speaks {spoken}: run openviking=={spoken}, or set "
        f'ovVersionCheck = "warn" to go on against {reported} at your own risk (docs/ARCHITECTURE.md, '
        "Supporting a new OV version)"
    )
    return VersionVerdict("refuse" if strict else "warn", message)


def not_an_ov(exc: BaseException) -> str | None:
    """Why an answer of ``baseUrl`` means it is not a working OV (TLS against a plain server,
    or the reverse; an answer that is no OV's), or None: it does not answer (yet)."""
    text = str(exc)
    lowered = text.lower()
    if any(mark in lowered for mark in ("ssl", "tls", "certificate", "wrong_version_number", "wrong version number")):
        return f"TLS fails ({text[:200]}): is baseUrl https:// while OV serves plain http (or the reverse)?"
    if isinstance(exc, OVError) and exc.code == "BAD_RESPONSE":
        return f"it answers, but not as OV does ({exc.message[:200]}): is baseUrl OV's address and port?"
    if isinstance(exc, OVError) and exc.status and exc.status < 500:
        return f"its /health answers HTTP {exc.status} ({exc.message[:200]}): is baseUrl OV's address?"
    return None


@dataclass(frozen=True, slots=True)
class StartCheck:
    """What a starting process learns of the configured OV."""

    verdict: VersionVerdict | None
    """On the version it reports; None: no answer (or no OV's answer)."""
    problem: str | None = None
    """Why what answers is not a working OV (``not_an_ov``)."""
    key: str = "ok"
    """``OVClient.key_check``: ``ok`` or ``refuses key: ...``."""


async def start_check(ov: OVClient, *, strict: bool, timeout_s: float) -> StartCheck:
    """Ask ``ov``'s server its version and whether it takes ovstream's key."""
    try:
        async with asyncio.timeout(timeout_s):
            answer = await ov.health()
    except Exception as exc:  # unreachable or not an OV: nothing to judge yet
        return StartCheck(None, not_an_ov(exc))
    verdict = judge_version(answer.get("version"), strict=strict)
    return StartCheck(verdict, key=await ov.key_check(timeout_s))


def check_at_start(settings: Settings, process: str, *, timeout_s: float = START_CHECK_TIMEOUT_S) -> bool:
    """Ask the configured OV its version before ``process`` starts; log the verdict. False: the
    process must not start (another minor release and ``ovVersionCheck = "refuse"``). An OV
    that does not answer yet is not refused: the process starts and waits for it, as always;
    nor is one that refuses ovstream's key, or answers as no OV does: said in one line, with
    what to set, and the process waits (turns stay in their streams) until it is mended."""

    async def ask() -> StartCheck:
        ov = OVClient.from_settings(settings)
        try:
            return await start_check(ov, strict=settings.ov_version_check == "refuse", timeout_s=timeout_s)
        finally:
            await ov.aclose()

    found = asyncio.run(ask())
    verdict = found.verdict
    if verdict is None:
        if found.problem is not None:
            log.error("%s: %s is not a working OV: %s", process, settings.base_url, found.problem)
        else:
            log.info("%s: OV at %s does not answer yet; its version is not checked", process, settings.base_url)
        return True
    if verdict.level == "refuse":
        log.error("%s refuses to start: %s", process, verdict.message)
        return False
    (log.warning if verdict.level == "warn" else log.info)("%s: %s", process, verdict.message)
    if found.key != "ok":
        log.error("%s: OV at %s %s", process, settings.base_url, found.key)
    return True
