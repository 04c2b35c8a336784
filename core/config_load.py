"""``load_settings``: the ``Settings`` (core.config) of a process, from ``config/ovstream.toml``
(or ``--config``, or ``$OVSTREAM_CONFIG``), then the ``OVSTREAM_*`` environment, then overrides;
every bad value said in one line naming where it was set.
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings.exceptions import SettingsError

from core.config import SECRET_KEYS, Settings
from core.config_names import (
    ConfigError,
    env_field_of_parse_error,
    env_fields,
    env_name,
    format_errors,
    one_message,
    secrets_from_files,
    snake,
    unknown_env,
)

__all__ = ["ConfigError", "load_settings"]

log = logging.getLogger("core.config")  # the lines an operator knows, as before the split

DEFAULT_CONFIG_PATH = Path("config/ovstream.toml")
RETIRED_KEYS = {
    "claim_idle_ms": "a shard's new owner claims its pending entries as soon as it wins the lease",
    "stream_maxlen": "the streams are no longer capped at publish; capture trims only what it applied",
    "commit_tenant_wait_s": "commits of one OV user run side by side (OV merges their phase 2s)",
}
"""Keys earlier versions read, accepted (with a warning) so old config files still load."""
CONFIG_PATH_ENV = "OVSTREAM_CONFIG"


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Read the TOML file (if any), then the environment, then ``overrides``.

    The file is ``path``, else ``$OVSTREAM_CONFIG``, else ``config/ovstream.toml``
    when it exists. A missing explicit path, unreadable TOML or a bad value
    raises ``ConfigError`` naming the key.
    """
    explicit = path or os.environ.get(CONFIG_PATH_ENV)
    file_path = Path(explicit) if explicit else DEFAULT_CONFIG_PATH
    file_values: dict[str, Any] = {}
    if file_path.exists():
        try:
            raw = tomllib.loads(file_path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read {file_path}: {exc}") from exc
        file_values = raw.get("ovstream", raw)
    elif explicit:
        raise ConfigError(f"config file not found: {file_path}")
    for warning in unknown_env(os.environ, Settings.model_fields, SECRET_KEYS):
        log.warning("%s", warning)
    # Environment beats the file: drop file keys that the environment sets.
    env_set = env_fields(os.environ)
    merged = {k: v for k, v in file_values.items() if snake(k) not in env_set}
    merged.update(secrets_from_files(merged, SECRET_KEYS))
    merged.update(overrides)
    for key in [k for k in merged if snake(k) in RETIRED_KEYS]:
        log.warning("config key %r is no longer used (%s); ignoring it", key, RETIRED_KEYS[snake(key)])
        del merged[key]

    def where(key: str) -> str:
        if key in overrides:
            return key
        if key in file_values and key in merged:
            return f"{key} (in {file_path})"
        if snake(key) in env_set:
            return env_name(snake(key))
        return key

    try:
        return Settings(**merged)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, where, Settings.model_fields)) from exc
    except SettingsError as exc:  # an OVSTREAM_* value that is not valid JSON for a dict field
        field = env_field_of_parse_error(str(exc))
        if field is None:
            raise ConfigError(f"invalid configuration: {exc}") from exc
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ConfigError(one_message([f"{env_name(field)}: not a JSON object{cause}"])) from exc
