"""The names a setting goes by, so a message names what the user wrote.

A setting is ``recall_limit`` in code, ``recallLimit`` (or ``recall_limit``) in
``config/ovstream.toml`` and ``OVSTREAM_RECALL_LIMIT`` in the environment. A bad value
is reported under the name it was given by; a name that is no setting (a typo) is
reported with the nearest real one, because a misspelt variable silently ignored is a
setting the user believes is in force. Secrets may come from files named by
``<key>_file`` (``OVSTREAM_<KEY>_FILE``), and a missing or unreadable one is named too.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the key."""


ENV_PREFIX = "OVSTREAM_"

TOOLING_ENV = frozenset(
    {
        "OVSTREAM_CONFIG",  # the config file's path (core.config)
        "OVSTREAM_LOG_LEVEL",  # the RPC app's log level under an outside ASGI server
        "OVSTREAM_BIN",
        "OVSTREAM_CACHE",
        "OVSTREAM_PYTHON",
        "OVSTREAM_OV_SERVER",
        "OVSTREAM_OV_VENV",
        "OVSTREAM_OPENCLAW",
        "OVSTREAM_NODE24_BIN",
        "OVSTREAM_MODEL_LOG_DIR",
        "OVSTREAM_ECHO_ANSWER",
        "OVSTREAM_FAKE_OV_URL",
    }
)
"""``OVSTREAM_*`` variables that are not settings: read by ./run, ./test, the launchers and
the dev tooling."""
TOOLING_ENV_PREFIXES = ("OVSTREAM_TEST_", "OVSTREAM_REQUIRE_", "OVSTREAM_KEEP_", "OVSTREAM_BENCH_")


def camel(name: str) -> str:
    """``recall_limit`` -> ``recallLimit`` (the seed's spelling)."""
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def snake(name: str) -> str:
    """``recallLimit`` -> ``recall_limit``; a snake_case name is unchanged."""
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)


def env_name(field: str) -> str:
    """The variable that sets ``field``."""
    return f"{ENV_PREFIX}{field.upper()}"


def env_fields(environ: Mapping[str, str]) -> set[str]:
    """The fields the environment sets (any ``OVSTREAM_*``, as snake_case)."""
    return {k[len(ENV_PREFIX) :].lower() for k in environ if k.startswith(ENV_PREFIX)}


def _nearest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_env(environ: Mapping[str, str], fields: Collection[str], file_fields: Collection[str]) -> list[str]:
    """One warning per ``OVSTREAM_*`` variable that sets nothing: not a setting (``fields``),
    not a setting's file (``file_fields``: ``OVSTREAM_<KEY>_FILE``), not the tooling's."""
    known = {env_name(f) for f in fields} | {env_name(f"{f}_file") for f in file_fields}
    out = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known or name in TOOLING_ENV:
            continue
        if name.startswith(TOOLING_ENV_PREFIXES):
            continue
        out.append(f"{name} is not an ovstream setting{_nearest(name, known)}; it is ignored")
    return out


def unknown_key_hint(key: str, fields: Collection[str]) -> str:
    """`` (did you mean recallLimit?)`` for a config-file key that is no setting."""
    spelled_camel = key != snake(key)
    candidates = [camel(f) if spelled_camel else f for f in fields]
    return _nearest(key, candidates)


_ENV_PARSE = re.compile(r'field "(?P<field>\w+)" from source "EnvSettingsSource"')


def env_field_of_parse_error(message: str) -> str | None:
    """The field named by pydantic-settings' "error parsing value for field ... from source
    EnvSettingsSource" (a dict-valued variable that is not JSON), else None."""
    match = _ENV_PARSE.search(message)
    return match.group("field") if match else None


def format_errors(err: ValidationError, where: Callable[[str], str], fields: Collection[str]) -> str:
    """One line per bad value, under the name it was given by (``where``: a file key, an
    ``OVSTREAM_*`` variable or a keyword), with the nearest setting for a name that is none."""
    lines = []
    for e in err.errors():
        key = str(e["loc"][0]) if e["loc"] else ""
        rest = "".join(f".{p}" for p in e["loc"][1:])
        msg = e["msg"]
        if e["type"] == "extra_forbidden" and not rest:
            msg = f"not an ovstream setting{unknown_key_hint(key, fields)}"
        lines.append(f"{where(key) + rest if key else '<settings>'}: {msg}")
    return one_message(lines)


def one_message(lines: list[str]) -> str:
    """One line ``invalid configuration: <the problem>``, or a header and a problem per line."""
    if len(lines) == 1:
        return f"invalid configuration: {lines[0]}"
    return "\n  ".join(["invalid configuration:", *lines])


def secrets_from_files(values: dict[str, Any], secret_keys: Iterable[str]) -> dict[str, Any]:
    """SECRET_KEYS read from files: ``<key>_file`` (or camelCase) in ``values`` (popped),
    or ``OVSTREAM_<KEY>_FILE``; a dict-valued key's file holds JSON. A key also given
    directly keeps that value."""
    out: dict[str, Any] = {}
    for key in secret_keys:
        path = None
        for name in (f"{key}_file", camel(f"{key}_file")):
            if name in values:
                path = values.pop(name)
        path = os.environ.get(f"OVSTREAM_{key.upper()}_FILE") or path
        if path is None or key in values or camel(key) in values or f"OVSTREAM_{key.upper()}" in os.environ:
            continue
        try:
            text = Path(str(path)).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"invalid configuration: {key}_file: cannot read {path}: {exc.strerror or exc}") from exc
        if key in ("user_api_keys", "rpc_credentials"):
            try:
                out[key] = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"invalid configuration: {key}_file: {path} is not JSON: {exc}") from exc
        else:
            out[key] = text
    return out
