"""ovstream's core: pure logic and typed clients.

The public surface is re-exported here (loaded on first use, so importing one
submodule does not import them all); everything else is an implementation detail
of its module.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Settings": "core.config",
    "load_settings": "core.config_load",
    "ConfigError": "core.config",
    "TurnEvent": "core.events",
    "CommitRequest": "core.events",
    "CommitOutcome": "core.events",
    "ContextSnapshot": "core.events",
    "EventDecodeError": "core.events",
    "ov_session_id": "core.ids",
    "resolve_agent_id": "core.ids",
    "is_bypassed": "core.ids",
    "estimate_tokens": "core.messages.tokens",
    "estimate_message_tokens": "core.messages.tokens",
    "allocate_context_budget": "core.budget",
    "ContextBudget": "core.budget",
    "run_pipeline": "core.messages.pipeline",
    "OVClient": "core.ov.client",
    "OVError": "core.ov.client",
    "OVUnavailable": "core.ov.client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
