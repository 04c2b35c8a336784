"""core.fairness: which commit job goes before which (issue 58). Table-driven, plus properties
over any set of lines, and a simulated burst: a tenant's thousand jobs delay another's by one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.fairness import (
    BACKGROUND,
    LEGACY_LINE,
    URGENT,
    dequeue_order,
    line_of,
    served,
    tenant_of_line,
    tenant_tag,
)


@pytest.mark.parametrize(
    ("reason", "urgency"),
    [
        ("compact", URGENT),
        ("manual", URGENT),
        ("threshold", BACKGROUND),
        ("session_end", BACKGROUND),
        ("memory_store", BACKGROUND),
        (None, BACKGROUND),  # not a commit's own chain: a repair, an extraction check
    ],
)
def test_a_line_is_its_tenant_and_urgency(reason: str | None, urgency: str) -> None:
    line = line_of("acme", reason)
    assert line == f"{tenant_tag('acme')}:{urgency}"
    assert tenant_of_line(line) == tenant_tag("acme")


def test_tenants_are_digests_and_the_deployments_own_user_has_one() -> None:
    assert "acme" not in tenant_tag("acme") and len(tenant_tag("acme")) == 16
    assert tenant_tag(None) == tenant_tag("") != tenant_tag("acme")
    assert tenant_of_line(LEGACY_LINE) == LEGACY_LINE


A, B, C = sorted(tenant_tag(t) for t in ("a", "b", "c"))
"""Three tenants' tags, in name order."""


@pytest.mark.parametrize(
    ("rotation", "lines", "order", "rotation_after"),
    [
        # new tenants join in name order; urgent before background
        ([], [f"{B}:b", f"{A}:b", f"{A}:u"], [f"{A}:u", f"{A}:b", f"{B}:b"], [A, B]),
        # the rotation is kept; a tenant with no line leaves it
        ([B, C, A], [f"{A}:b", f"{B}:u", f"{C}:b"], [f"{B}:u", f"{C}:b", f"{A}:b"], [B, C, A]),
        # one not served lately (new to the rotation) goes first
        ([C, B], [f"{B}:b", f"{A}:u"], [f"{A}:u", f"{B}:b"], [A, B]),
        # the legacy line takes a turn as a tenant of its own
        ([A], [LEGACY_LINE, f"{A}:b"], [LEGACY_LINE, f"{A}:b"], [LEGACY_LINE, A]),
    ],
)
def test_dequeue_order(rotation: list[str], lines: list[str], order: list[str], rotation_after: list[str]) -> None:
    assert dequeue_order(rotation, lines) == (order, rotation_after)


def test_the_tenant_served_goes_to_the_back() -> None:
    assert served([A, B, C], f"{A}:u") == [B, C, A]
    assert served([A, B, C], f"{B}:b") == [A, C, B]
    assert served([A], f"{C}:b") == [A, C]


_tags = st.sampled_from([tenant_tag(str(i)) for i in range(6)])
_lines = st.lists(st.tuples(_tags, st.sampled_from([URGENT, BACKGROUND])).map(lambda t: f"{t[0]}:{t[1]}"), unique=True)


@given(rotation=st.lists(_tags, unique=True), lines=_lines)
def test_every_line_is_read_once_and_a_tenants_urgent_line_first(rotation: list[str], lines: list[str]) -> None:
    order, after = dequeue_order(rotation, lines)
    assert sorted(order) == sorted(lines)
    assert sorted(after) == sorted({tenant_of_line(line) for line in lines})
    for line in order:
        if line.endswith(":" + BACKGROUND):
            urgent = tenant_of_line(line) + ":" + URGENT
            assert urgent not in order or order.index(urgent) < order.index(line)
    # each tenant's lines are next to each other, in the rotation's order
    tenants = [tenant_of_line(line) for line in order]
    assert [t for i, t in enumerate(tenants) if i == 0 or tenants[i - 1] != t] == after


@given(workers=st.integers(1, 4), burst=st.integers(1, 1000), arrives_after=st.integers(0, 50))
def test_a_burst_delays_another_tenants_job_by_about_one_job_per_worker(
    workers: int, burst: int, arrives_after: int
) -> None:
    """Simulated dequeues: A's burst is queued; after ``arrives_after`` jobs B's one arrives;
    each worker keeps its own rotation. B's job is taken within one job per worker and its
    own (a FIFO: behind what is left of the burst)."""
    queued = {f"{A}:b": burst}
    rotations: list[list[str]] = [[] for _ in range(workers)]
    taken = 0
    b_arrived_at = None
    while True:
        if taken == arrives_after and b_arrived_at is None:
            queued[f"{B}:u"] = 1
            b_arrived_at = taken
        w = taken % workers
        order, rotations[w] = dequeue_order(rotations[w], [line for line, n in queued.items() if n])
        if not order:
            break
        line = order[0]
        queued[line] -= 1
        rotations[w] = served(rotations[w], line)
        taken += 1
        if line == f"{B}:u":
            assert b_arrived_at is not None and taken - b_arrived_at <= workers + 1
            return
    assert b_arrived_at is None or queued.get(f"{B}:u") == 0
