"""One version for the service, the plugin and the image (docs/UPGRADING.md, "Versions"):
pyproject.toml's, the plugin's package.json, package-lock.json, manifest and ENGINE_VERSION,
deploy/Dockerfile's label, the newest CHANGELOG.md entry and ``ovstream --version``."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from workers.version import installed_version

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "clients" / "openclaw"


def release() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_plugin_and_the_image_say_the_service_version():
    version = release()
    lock = json.loads((PLUGIN / "package-lock.json").read_text())
    engine = re.search(r'ENGINE_VERSION = "([^"]+)"', (PLUGIN / "src" / "version.ts").read_text())
    label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', (ROOT / "deploy" / "Dockerfile").read_text())
    found = {
        "package.json": json.loads((PLUGIN / "package.json").read_text())["version"],
        "package-lock.json": lock["version"],
        "package-lock.json packages['']": lock["packages"][""]["version"],
        "openclaw.plugin.json": json.loads((PLUGIN / "openclaw.plugin.json").read_text())["version"],
        "ENGINE_VERSION": engine.group(1) if engine else None,
        "deploy/Dockerfile label": label.group(1) if label else None,
    }
    for tag in re.findall(r"registry\.example/ovstream:(\S+)", (ROOT / "deploy" / "k8s" / "README.md").read_text()):
        found[f"deploy/k8s/README.md tag {tag}"] = tag
    assert found == dict.fromkeys(found, version)


def test_the_changelog_leads_with_this_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert headings and headings[0] == release(), headings[:3]


def test_ovstream_version_is_the_release():
    installed = installed_version()
    if installed.startswith("unknown"):
        pytest.skip("run from a checkout that was never installed")
    assert installed == release()
