import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workers.cli import COMMANDS, main


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_bad_config_is_a_clear_error(capsys, tmp_path):
    assert main(["--config", str(tmp_path / "missing.toml"), "up"]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_bad_config_value_names_the_key(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OVSTREAM_RPC_PORT", "0")
    assert main(["up"]) == 2
    assert "OVSTREAM_RPC_PORT" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_has_help(name):
    exe = shutil.which("ovstream", path=str(Path(sys.executable).parent))
    assert exe, "the ovstream console script is installed with the package"
    out = subprocess.run([exe, name, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert name in out.stdout


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ([], None),
        (["status"], "status"),
        (["--config", "x.toml", "dlq", "list"], "dlq"),
        (["--log-level", "DEBUG", "rpc", "--port", "1"], "rpc"),
        (["--config", "status", "health"], "health"),  # the value of --config is not the command
        (["--help"], None),
        (["no-such-command"], None),
    ],
)
def test_the_command_is_found_past_the_global_options(argv, command):
    from workers.cli import command_in

    assert command_in(argv) == command


def test_listing_the_commands_imports_none_of_them():
    probe = (
        "import sys; from workers.cli import build_parser; build_parser().format_help(); "
        "print(sorted(m for m in sys.modules if m.startswith(('workers.rpc', 'workers.capture', "
        "'workers.commits', 'workers.dev', 'workers.cli.'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
