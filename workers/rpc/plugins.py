"""Which plugin versions talk to this RPC, and the oldest it accepts (docs/UPGRADING.md).

Every call of the OpenClaw plugin (0.3.0 on) says its release in ``X-Ovstream-Plugin``.
``PluginGate`` answers 426 to a plugin older than ``MIN_PLUGIN_VERSION``, with what to do,
and 400 to a header that is no version; it remembers the versions that called lately, which
the RPC's health record carries to ``ovstream status`` and ``GET /v1/status``. A POST without
the header is a plugin from before 0.3.0 (or a hand-made call): served, and counted as
``unversioned``. GETs without it (probes, KEDA) and the console's forms are not plugins and
not counted.
"""

from __future__ import annotations

import functools
import re
import time
from collections import OrderedDict

from starlette.types import ASGIApp, Receive, Scope, Send

from core import defaults
from workers.rpc.responses import error_response

PLUGIN_HEADER = b"x-ovstream-plugin"
UNVERSIONED = "unversioned"
"""What a plugin call without the header is counted as (a plugin from before 0.3.0)."""

_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:[-+][0-9A-Za-z.-]{1,32})?")


def release_of(text: str) -> tuple[int, int, int] | None:
    """``"0.2.0"`` -> ``(0, 2, 0)``; a pre-release or build suffix is kept out of the
    comparison; None for anything that is not such a version."""
    found = _VERSION.fullmatch(text)
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def refusal(sent: str) -> tuple[int, str, str] | None:
    """Why a plugin sending ``sent`` is not served (status, code, message), or None."""
    return _refusal(sent, defaults.MIN_PLUGIN_VERSION)


VERDICTS_KEPT = 256
"""Header values whose verdict the gate remembers: a fleet sends a handful, so each call's costs
a dictionary lookup; any number of odd ones only cycle it (bounded)."""


@functools.lru_cache(maxsize=VERDICTS_KEPT)
def verdict(header: bytes, oldest: str) -> tuple[str, tuple[int, str, str] | None]:
    """The version a ``X-Ovstream-Plugin`` header value says, and why it is refused (or None),
    against the oldest accepted release ``oldest``: remembered per value (parsing both versions
    and matching the pattern twice on every assemble cost about 3 us of its ~120 us)."""
    sent = header.decode("latin-1").strip()
    return sent, _refusal(sent, oldest)


def _refusal(sent: str, oldest_text: str) -> tuple[int, str, str] | None:
    release = release_of(sent)
    if release is None:
        return 400, "plugin_version_invalid", f"X-Ovstream-Plugin {sent[:40]!r} is not a version (like 0.2.0)"
    oldest = release_of(oldest_text)
    if oldest is not None and release < oldest:
        return (
            426,
            "plugin_too_old",
            f"the ovstream plugin {sent} is older than the oldest this service accepts "
            f"({oldest_text}): upgrade the plugin (docs/UPGRADING.md)",
        )
    return None


class SeenPlugins:
    """The plugin versions heard within ``PLUGIN_SEEN_S``, at most ``PLUGIN_VERSIONS_KEPT``
    (the oldest heard forgotten first): bounded whatever callers send."""

    def __init__(self) -> None:
        self._heard: OrderedDict[str, float] = OrderedDict()

    def saw(self, version: str, now: float | None = None) -> None:
        self._heard[version] = time.monotonic() if now is None else now
        self._heard.move_to_end(version)
        while len(self._heard) > defaults.PLUGIN_VERSIONS_KEPT:
            self._heard.popitem(last=False)

    def recent(self, now: float | None = None) -> list[str]:
        """The versions heard lately, sorted."""
        now = time.monotonic() if now is None else now
        for version in [v for v, at in self._heard.items() if now - at > defaults.PLUGIN_SEEN_S]:
            del self._heard[version]
        return sorted(self._heard)


class PluginGate:
    """ASGI middleware: refuse a plugin too old (426) or a version header that is none (400);
    remember the versions that call."""

    def __init__(self, app: ASGIApp, seen: SeenPlugins) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            sent = next((value for name, value in scope["headers"] if name == PLUGIN_HEADER), None)
            if sent is not None:
                version, refused = verdict(sent, defaults.MIN_PLUGIN_VERSION)
                if refused is not None:
                    await error_response(*refused)(scope, receive, send)
                    return
                self.seen.saw(version)
            elif scope["method"] == "POST" and scope["path"].startswith("/v1/"):
                self.seen.saw(UNVERSIONED)
        await self.app(scope, receive, send)
