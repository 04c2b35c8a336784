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
from core.ov.client import OVClient

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


async def server_verdict(ov: OVClient, *, strict: bool, timeout_s: float) -> VersionVerdict | None:
    """The verdict on the version ``ov``'s server reports; None when it does not answer in time."""
    try:
        answer = await asyncio.wait_for(ov.health(), timeout_s)
    except Exception:  # unreachable or unhealthy: nothing to judge yet
        return None
    return judge_version(answer.get("version"), strict=strict)


def check_at_start(settings: Settings, process: str, *, timeout_s: float = START_CHECK_TIMEOUT_S) -> bool:
    """Ask the configured OV its version before ``process`` starts; log the verdict. False: the
    process must not start (another minor release and ``ovVersionCheck = "refuse"``). An OV
    that does not answer yet is not refused: the process starts and waits for it, as always."""

    async def ask() -> VersionVerdict | None:
        ov = OVClient.from_settings(settings)
        try:
            return await server_verdict(ov, strict=settings.ov_version_check == "refuse", timeout_s=timeout_s)
        finally:
            await ov.aclose()

    verdict = asyncio.run(ask())
    if verdict is None:
        log.info("%s: OV at %s does not answer yet; its version is not checked", process, settings.base_url)
        return True
    if verdict.level == "refuse":
        log.error("%s refuses to start: %s", process, verdict.message)
        return False
    (log.warning if verdict.level == "warn" else log.info)("%s: %s", process, verdict.message)
    return True
