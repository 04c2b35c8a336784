"""The in-memory OpenViking 0.5.2 fake: unit tests, the embedded demo and ``ovstream fake-ov``.

Development tooling only: no production module imports it (import-linter checks).
"""

from workers.dev.fake_ov.app import FakeOV

__all__ = ["FakeOV"]
