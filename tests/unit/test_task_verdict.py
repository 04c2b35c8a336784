import pytest

from core.ov.client import OVError
from core.ov.models import TaskState
from core.ov.tasks import judge_phase2_read, next_read_delay, task_verdict


@pytest.mark.parametrize(
    ("status", "result", "error", "expected"),
    [
        ("pending", None, None, None),
        ("running", None, None, None),
        ("cancelling", None, None, None),
        (
            "completed",
            {"memories_extracted": {"memory_write": 2, "memory_edit": 1}},
            None,
            ("completed", {"memories_extracted": 3}),
        ),
        ("completed", {"memories_extracted": {}}, None, ("completed", {"memories_extracted": 0})),
        ("failed", None, "bad program", ("failed", {"error": "bad program"})),
        ("failed", None, None, ("failed", {"error": "phase 2 failed"})),
        ("cancelled", None, None, ("failed", {"error": "phase 2 cancelled"})),
        ("skipped", None, None, ("skipped", {})),
    ],
)
def test_task_verdict(status, result, error, expected):
    assert task_verdict(TaskState(task_id="t", status=status, result=result, error=error)) == expected


RUNNING = TaskState(task_id="t", status="running")
DONE = TaskState(task_id="t", status="completed", result={"memories_extracted": {"memory_write": 1}})
BROKEN = OVError("UNAVAILABLE", "down", status=503)
LATE = "phase 2 not finished within 30s"


@pytest.mark.parametrize(
    ("task", "error", "failed_reads", "deadline_passed", "expected"),
    [
        (RUNNING, None, 0, False, (None, {}, 0)),
        (RUNNING, None, 2, False, (None, {}, 0)),  # a good read resets the count
        (DONE, None, 1, True, ("completed", {"memories_extracted": 1}, 0)),  # a final state beats the deadline
        (None, BROKEN, 0, False, (None, {}, 1)),
        (None, BROKEN, 40, False, (None, {}, 41)),  # failed reads never fail the commit (OV restarts)
        (RUNNING, None, 0, True, ("timeout", {"error": LATE}, 0)),
        (None, BROKEN, 3, True, ("timeout", {"error": f"{LATE} (the last 4 task reads failed: {BROKEN})"}, 4)),
    ],
)
def test_judge_phase2_read(task, error, failed_reads, deadline_passed, expected):
    read = judge_phase2_read(task, error, failed_reads=failed_reads, deadline_passed=deadline_passed, deadline_s=30)
    assert (read.status, read.fields, read.failed_reads) == expected


@pytest.mark.parametrize(
    ("failed_reads", "expected"),
    [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0), (9, 4.0)],  # doubles 3 times at most
)
def test_next_read_delay_doubles_per_failed_read(failed_reads, expected):
    assert next_read_delay(0.5, failed_reads, 3, 15.0) == expected


def test_next_read_delay_is_capped():
    assert next_read_delay(1.0, 10, 10, 15.0) == 15.0
    assert next_read_delay(20.0, 0, 5, 15.0) == 20.0  # never shorter than the interval itself
