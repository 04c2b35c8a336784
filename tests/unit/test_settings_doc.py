"""Every setting, flag and default the docs state is the code's: the settings tables are made
from their sources (workers.dev.settings_doc), every setting has a meaning to show, and the
import command's flags say the plugin's defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import Settings
from workers.dev import settings_doc

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", list(settings_doc.TABLES), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_settings_tables_are_their_sources(doc: Path) -> None:
    assert settings_doc.generated(doc) == doc.read_text(), (
        f"{doc.relative_to(ROOT)}: the settings table differs from its source; "
        "run `.venv/bin/python -m workers.dev.settings_doc --write`"
    )


def test_every_setting_says_what_it_means() -> None:
    assert [n for n, f in Settings.model_fields.items() if not (f.description or "").strip()] == []


def test_the_service_table_lists_every_setting_with_its_true_default() -> None:
    table = settings_doc.service_table()
    for name, field in Settings.model_fields.items():
        row = next((r for r in table.splitlines() if r.startswith(f"| `{field.alias}` |")), None)
        assert row is not None, name
        default = field.get_default(call_default_factory=True)
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            assert f"| `{default}` |" in row, (name, row)


def _import_defaults() -> dict[str, int]:
    source = (ROOT / "clients" / "openclaw" / "src" / "history.ts").read_text()
    found = re.search(r"IMPORT_DEFAULTS = \{([^}]*)\}", source)
    assert found is not None
    return {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", found.group(1))}


def test_the_import_flags_defaults_in_the_readme_are_the_plugins() -> None:
    defaults = _import_defaults()
    flags = {"rate": "--rate", "maxBacklog": "--max-backlog", "maxCommits": "--max-commits"}
    readme = (ROOT / "README.md").read_text()
    for key, flag in flags.items():
        said = re.findall(rf"`{flag}`[^()]*\(default (\d+)", readme)
        assert said, f"the README does not say {flag}'s default"
        assert {int(s) for s in said} == {defaults[key]}, (flag, said, defaults[key])
