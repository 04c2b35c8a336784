"""Every repository path and README section that a doc, a comment or a config file cites
exists: a reader sent to a module (``workers/<package>/<module>.py``) or a README section
finds it. The docs stand on
their own: none sends a reader outside the repository (``../shared/``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CITED_PATH = re.compile(
    r"(?<![\w/.@-])((?:core|workers|tests|deploy|bench|docs|scripts|clients|config|\.ci)/[\w./@-]*[\w/])(?![*\w])"
)
"""A path inside the repository, as a doc or a comment writes one."""
CITED_SECTION = re.compile(r'README[\s#,]*"([A-Z][^"]*)"')
"""The README's name, then a heading of it, quoted (a comma between them or not)."""
TEXT_FILES = re.compile(r"\.(py|md|ya?ml|ts|sh|toml|service|timer|json)$|(^|/)(run|test|Procfile)$")
NOT_CITATIONS = {"config/export.yaml"}
"""Paths that are a sample conversation's text, not a citation."""


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        f
        for f in listed
        if TEXT_FILES.search(f) and "node_modules" not in f and "/schemas/" not in f and (ROOT / f).is_file()
    ]


def _headings() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    return {line.lstrip("#").strip() for line in readme.splitlines() if line.startswith("#")}


def test_every_cited_path_exists() -> None:
    missing = {}
    for name in _tracked():
        for match in CITED_PATH.finditer((ROOT / name).read_text(errors="replace")):
            path = match.group(1).rstrip("/.")
            if any(c in path for c in "<{$") or path in NOT_CITATIONS:
                continue
            if not (ROOT / path).exists():
                missing.setdefault(path, []).append(name)
    assert not missing, missing


def test_every_cited_readme_section_exists() -> None:
    headings, missing = _headings(), {}
    for name in _tracked():
        text = re.sub(r"\s*\n\s*#?\s*", " ", (ROOT / name).read_text(errors="replace"))  # a cite over two lines
        for match in CITED_SECTION.finditer(text):
            if match.group(1) not in headings:
                missing.setdefault(match.group(1), []).append(name)
    assert not missing, missing


@pytest.mark.parametrize("doc", ["README.md", "docs/ARCHITECTURE.md", "docs/OV-NOTES.md", "docs/FAILURE-MODES.md"])
def test_the_docs_stand_on_their_own(doc: str) -> None:
    assert "../shared" not in (ROOT / doc).read_text()
