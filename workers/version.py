"""The release this process runs: pyproject.toml's version, as installed.

One number for the service, the plugin (clients/openclaw/package.json, its manifest and
``ENGINE_VERSION``) and the image (deploy/Dockerfile's label); tests/unit/test_versions.py
keeps them one, docs/UPGRADING.md says how it is bumped.
"""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def installed_version() -> str:
    """The version of the installed ``ovstream`` distribution (pyproject.toml's)."""
    try:
        return metadata.version("ovstream")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"
