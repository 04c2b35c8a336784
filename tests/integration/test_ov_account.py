"""``ovstream ov-account`` against the real openviking-server in API-key mode: the key it
writes is a user key the data APIs take (the root key is refused there), a second run
changes nothing, and what goes wrong is one line."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
import pytest

from tests.helpers.e2e import unique
from workers.cli import main


def _ov_account(monkeypatch: pytest.MonkeyPatch, url: str, *argv: str) -> int:
    monkeypatch.setenv("OVSTREAM_BASE_URL", url)
    return main(["ov-account", *argv])


def test_the_key_it_writes_opens_a_session(
    ov_keyed_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ov-root-key"
    root.write_text(ov_keyed_server.root_api_key + "\n")
    key = tmp_path / "keys" / "ov-key"
    account = unique("acct")
    argv = ["--root-key-file", str(root), "--write-key", str(key), "--account", account, "--wait", "30"]
    assert _ov_account(monkeypatch, ov_keyed_server.url, *argv) == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    user_key = key.read_text().strip()
    r = httpx.post(f"{ov_keyed_server.url}/api/v1/sessions", json={}, headers={"X-API-Key": user_key}, timeout=30)
    assert r.status_code == 200, r.text
    assert _ov_account(monkeypatch, ov_keyed_server.url, *argv) == 0  # in place: nothing to do
    assert key.read_text().strip() == user_key
    assert "already holds a key" in capsys.readouterr().out

    key.unlink()  # the account exists, its key is gone: say so, write nothing
    assert _ov_account(monkeypatch, ov_keyed_server.url, *argv) == 2
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "exists but its key is not in" in said[0] and not key.exists()


def test_a_wrong_root_key_is_one_line(
    ov_keyed_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ov-root-key"
    root.write_text("not-the-root-key\n")
    code = _ov_account(
        monkeypatch, ov_keyed_server.url, "--root-key-file", str(root), "--write-key", str(tmp_path / "k")
    )
    out, err = capsys.readouterr()
    assert code == 2 and len(out.strip().splitlines()) == 1 and "UNAUTHENTICATED" in out, (out, err)
    assert "Traceback" not in out + err and not (tmp_path / "k").exists()
