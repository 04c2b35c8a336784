"""``ovstream ov-account``: give ovstream an identity on an OpenViking served to the network.

OV 0.5.2 serves its unauthenticated dev mode on loopback only; on a network (compose, two
machines) it runs in API-key mode, where the root key is refused on the data APIs. So the
service needs a user key, which only OV's admin API can make: this command creates an
account with its admin user and writes that user's key to a file (mode 0600) that
``OVSTREAM_API_KEY_FILE`` names. It runs once (compose's ``ov-init``); run again with the
key file in place, it does nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from pathlib import Path

from core.config import Settings
from core.ov.client import OVClient
from core.ov.envelope import OVError, OVRefused, OVUnavailable

log = logging.getLogger(__name__)


def add_ov_account_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root-key-file", required=True, help="file holding OV's server.root_api_key")
    parser.add_argument("--write-key", required=True, help="where to write the new user key (OVSTREAM_API_KEY_FILE)")
    parser.add_argument("--account", default="ovstream", help="OV account to create (default ovstream)")
    parser.add_argument("--user", default="ovstream", help="its admin user, the service's identity (default ovstream)")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for OV to answer (default 120)")


def cli_ov_account(settings: Settings, args: argparse.Namespace) -> int:
    key_file = Path(args.write_key)
    if key_file.exists() and key_file.read_text(encoding="utf-8").strip():
        print(f"ovstream ov-account: {key_file} already holds a key; nothing to do")
        return 0
    try:
        root_key = Path(args.root_key_file).read_text(encoding="utf-8").strip()
    except OSError as exc:
        print(f"ovstream ov-account: cannot read --root-key-file {args.root_key_file}: {exc.strerror or exc}")
        return 2
    if not root_key:
        print(f"ovstream ov-account: --root-key-file {args.root_key_file} is empty")
        return 2
    root = OVClient.from_settings(settings.model_copy(update={"api_key": root_key}))
    try:
        user_key = asyncio.run(_create(root, args.account, args.user, args.wait, settings.base_url))
    except OVError as exc:
        if exc.code == "ALREADY_EXISTS":
            print(
                f"ovstream ov-account: OV account {args.account!r} exists but its key is not in {key_file}; "
                "put the key there, or pass another --account"
            )
        elif isinstance(exc, OVRefused):
            where = f"OV at {settings.base_url}"
            print(f"ovstream ov-account: {where} refuses the root key in {args.root_key_file}: {exc.code} (HTTP 401)")
        else:
            print(f"ovstream ov-account: OV at {settings.base_url} refused: {exc}")
        return 2
    except TimeoutError as exc:
        print(f"ovstream ov-account: {exc}")
        return 1
    key_file.parent.mkdir(parents=True, exist_ok=True)
    partial = key_file.with_name(key_file.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(user_key + "\n")
    partial.replace(key_file)  # whole or absent: a crash never leaves half a key
    print(f"ovstream ov-account: created OV account {args.account!r} (user {args.user!r}); its key is in {key_file}")
    return 0


async def _create(root: OVClient, account: str, user: str, wait_s: float, where: str) -> str:
    try:
        deadline, said = time.monotonic() + wait_s, False
        while True:
            try:
                await root.health()
                break
            except OVError as exc:
                if not isinstance(exc, OVUnavailable) or isinstance(exc, OVRefused):
                    break  # OV answers: the admin call says the rest
                if time.monotonic() > deadline:
                    raise TimeoutError(f"OV at {where} did not answer within {wait_s:.0f}s ({exc})") from exc
                if not said:  # one line, not silence, while it waits (--wait)
                    print(
                        f"ovstream ov-account: waiting up to {wait_s:.0f} s for OV at {where} to answer ({exc})",
                        flush=True,
                    )
                    said = True
            await asyncio.sleep(1.0)
        created = await root.admin_create_account(account, user)
        return str(created["user_key"])
    finally:
        await root.aclose()
