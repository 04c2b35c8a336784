"""The fleet bench runs every lifetime on its simulated clock (issue 44): a lifetime setting
added later and left on the wall clock would keep its keys for a real day in a simulated
one, and the bench's memory would show a growth no deployment has."""

from __future__ import annotations

import sys
from pathlib import Path

from core.config import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fleet


def test_every_lifetime_of_redis_is_on_the_simulated_clock() -> None:
    env = fleet.simulated_lifetimes(3 * 3600, 288.0)
    named = {n for n in Settings.model_fields if n.endswith(("_ttl_s", "_max_age_s"))}
    assert named - set(fleet.NOT_IN_REDIS) == set(fleet.lifetime_settings())
    for name in fleet.lifetime_settings():
        wall = int(env[f"OVSTREAM_{name.upper()}"])
        assert 1 <= wall <= max(60, 3 * 3600 / 288), name  # at most the simulated 3 h (or the setting's floor)
    settings = Settings(**{name: int(env[f"OVSTREAM_{name.upper()}"]) for name in fleet.lifetime_settings()})
    assert settings.console_trace_ttl_s > 0  # compressed, never switched off


def test_lifetimes_shorter_than_the_state_keep_their_own() -> None:
    env = fleet.simulated_lifetimes(3 * 3600, 1.0)
    assert int(env["OVSTREAM_RECALL_TURN_TTL_S"]) == Settings.model_fields["recall_turn_ttl_s"].default
    assert int(env["OVSTREAM_SESSION_STATE_TTL_S"]) == 3 * 3600
