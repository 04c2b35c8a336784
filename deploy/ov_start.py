"""Start openviking-server in the compose file's container: OV's config (mounted at
/etc/openviking/ov.conf, from deploy/openviking/ov.conf.example) plus what the deployment
decides, so the user edits only the models.

- ``server.host`` 0.0.0.0: OV 0.5.2 binds 127.0.0.1 unless told otherwise, and the other
  containers could not reach it;
- ``server.root_api_key`` from the compose secret ``ov-root-key``: off loopback OV refuses
  its unauthenticated dev mode, and the key lives in one place (``ovstream ov-account``
  reads the same secret to make ovstream's user key).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

CONFIG = Path("/etc/openviking/ov.conf")
ROOT_KEY = Path("/run/secrets/ov-root-key")
PORT = 1933


def compose_config(config: dict[str, Any], root_key: str) -> dict[str, Any]:
    """``config`` with the server settings of the compose deployment."""
    if not root_key:
        raise SystemExit(f"ov_start: {ROOT_KEY} is empty (deploy/README.md: make the secrets first)")
    server = {**config.get("server", {}), "host": "0.0.0.0", "port": PORT, "root_api_key": root_key}
    return {**config, "server": server}


def main() -> None:
    try:
        config = json.loads(CONFIG.read_text(encoding="utf-8"))
        root_key = ROOT_KEY.read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as exc:
        sys.exit(f"ov_start: {exc} (deploy/README.md: copy ov.conf.example to ov.conf, make the secrets)")
    written = Path("/tmp/ov.conf")
    fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(compose_config(config, root_key), out)
    os.execvp("openviking-server", ["openviking-server", "--config", str(written), "--host", "0.0.0.0"])


if __name__ == "__main__":
    main()
