"""The docs say what the code does (issue 55): each claim below once contradicted the code;
the test reads the doc and checks the claim against the code or the command it names."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from core.session import shard_of

ROOT = Path(__file__).resolve().parents[2]


def _read(path: str) -> str:
    return (ROOT / path).read_text()


def test_the_readme_gives_the_shard_formula_the_code_computes() -> None:
    flow = _read("README.md").split("## How it flows", 1)[1].split("\n## ", 1)[0]
    said = re.findall(r"shard = (.*?mod N)", flow)
    assert said == ["first 4 bytes of sha256(ov_session_id), big-endian, mod N"], said
    for sid in ("a", "session-1", "0f1e2d3c-4b5a-4697-8877-665544332211"):
        digest = hashlib.sha256(sid.encode()).digest()
        assert shard_of(sid, 7) == int.from_bytes(digest[:4], "big") % 7


def test_from_zero_calls_no_path_with_a_tilde_absolute() -> None:
    text = _read("docs/FROM-ZERO.md")
    assert not re.search(r"`~/[^`]*` \(an absolute path\)", text), "~ is no absolute path (OV does not expand it)"


def test_from_zero_says_how_to_find_the_session_id_it_asks_for() -> None:
    text = _read("docs/FROM-ZERO.md")
    for found in re.finditer(r"ovstream commits <sessionId>", text):
        around = text[found.start() : found.start() + 400]
        assert "openclaw sessions --json" in around, around


def test_the_compose_command_runs_where_the_readme_leaves_the_reader() -> None:
    section = _read("deploy/README.md").split("## compose", 1)[1]
    after_cd = section.split("cd deploy", 1)[1]
    command = re.search(r"`(docker compose[^`]*)`", after_cd)
    assert command is not None
    assert "-f deploy/" not in command.group(1), command.group(1)  # run from inside deploy/
    assert (ROOT / "deploy" / "compose.yaml").exists()


def test_the_health_timer_is_described_as_what_it_runs() -> None:
    unit = _read("deploy/systemd/ovstream-health@.service")
    assert "--probe live" in unit
    intro = _read("deploy/README.md").split("## systemd", 1)[0]
    timer = intro[intro.index("ovstream-health@.timer") :][:400]
    assert "--probe live" in timer and "heard of lately" not in timer, timer


def test_the_readme_says_how_to_reach_the_demos_redis() -> None:
    text = _read("README.md")
    serve = text[text.index("`./run --serve` keeps the service up") :][:600]
    assert "OVSTREAM_REDIS_URL=" in serve and ".venv/bin/ovstream" in serve, serve
    banner = _read("workers/dev/demo.py")
    assert "demo_environment(settings)} {ovstream_program()} status" in banner


def test_the_docs_pictures_of_the_console_are_the_browser_tests_shots() -> None:
    shots = set(re.findall(r'_shot\(browser, "([a-z-]+)"\)', _read("tests/console/test_console_browser.py")))
    pictures = {p.name for p in (ROOT / "docs" / "img").glob("console-*.png")}
    assert pictures == {f"console-{name}.png" for name in shots}, (pictures, shots)  # scripts/screenshots made them
    for shown in re.findall(r"\(docs/img/([^)]+)\)", _read("README.md")):
        assert shown in pictures, shown
    assert "OVSTREAM_DOC_SCREENSHOTS" in _read("scripts/screenshots")
