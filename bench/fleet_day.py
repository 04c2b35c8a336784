"""The fleet bench's simulated day (bench/fleet.py): sessions that start along a working day's
arrival curve, each a few turns apart, the transcript each turn carries, and what each
simulated hour saw."""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from core.events import TurnEvent

SIM_DAY_S = 86_400
HOURS = 24


def arrival_weight(hour: float) -> float:
    """A working day's load: low at night, a morning and an afternoon peak."""
    return 0.15 + math.exp(-(((hour - 10) / 2.5) ** 2)) + 0.8 * math.exp(-(((hour - 15) / 2.5) ** 2))


@dataclass
class Session:
    sid: str
    agent: str
    tenant: str
    start_s: float
    """Simulated second of its first turn."""
    turns: int
    gap_s: float
    """Simulated seconds between its turns."""
    sent: int = 0
    last_s: float = -math.inf
    """Simulated second of its newest turn."""
    ov_session_id: str = ""
    transcript: list[dict[str, Any]] = field(default_factory=list)

    def due_s(self) -> float:
        return self.start_s + self.sent * self.gap_s


def plan_sessions(args: argparse.Namespace, rng: random.Random) -> list[Session]:
    """Sessions with start times drawn from the arrival curve and turn counts adding to ``--turns``."""
    hours = [h + 0.5 for h in range(HOURS)]
    weights = [arrival_weight(h) for h in hours]
    mean_turns = max(1.0, args.turns / args.sessions)
    sessions = []
    for i in range(args.sessions * args.days):
        hour = rng.choices(range(HOURS), weights)[0] + HOURS * (i // args.sessions)
        turns = max(1, min(int(rng.expovariate(1 / mean_turns)) + 1, int(mean_turns * 6)))
        sessions.append(
            Session(
                sid=f"fleet-{i:06d}",
                agent=f"agent{rng.randrange(args.agents)}",
                tenant=f"t{rng.randrange(args.tenants)}",
                start_s=(hour + rng.random()) * 3600,
                turns=turns,
                gap_s=rng.uniform(30, 240),
            )
        )
    return sessions


def next_turn(session: Session, now_s: float) -> TurnEvent:
    i = session.sent
    before = len(session.transcript)
    session.transcript += [
        {"role": "user", "content": f"{session.sid} asks {i}: " + "how does the fleet keep up? " * 8},
        {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}: " + "shards, leases, queues. " * 16}]},
    ]
    session.sent += 1
    session.last_s = now_s
    return TurnEvent(
        event_id=uuid.uuid4().hex,
        session_id=session.sid,
        session_key=f"agent:{session.agent}:{session.sid}",
        messages=list(session.transcript),
        pre_prompt_message_count=before,
        user=session.tenant,
        published_at=time.time(),
    )


@dataclass
class Hourly:
    """What one simulated hour saw."""

    turns: int = 0
    snapshot_ms: list[float] = field(default_factory=list)
    assemble_ms: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else (values[0] if values else 0.0)
