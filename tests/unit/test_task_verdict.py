import pytest

from core.ov.client import OVError
from core.ov.models import TaskState
from core.ov.tasks import judge_phase2_read, task_verdict


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


@pytest.mark.parametrize(
    ("task", "error", "failed_reads", "deadline_passed", "expected"),
    [
        (RUNNING, None, 0, False, (None, {}, 0)),
        (RUNNING, None, 2, False, (None, {}, 0)),  # a good read resets the count
        (DONE, None, 1, True, ("completed", {"memories_extracted": 1}, 0)),  # a final state beats the deadline
        (None, BROKEN, 0, False, (None, {}, 1)),
        (None, BROKEN, 1, False, (None, {}, 2)),
        (None, BROKEN, 2, False, ("failed", {"error": "phase-2 task unreadable after 3 reads: " + str(BROKEN)}, 3)),
        (RUNNING, None, 0, True, ("timeout", {"error": "phase 2 not finished within 30s"}, 0)),
        (None, BROKEN, 0, True, ("timeout", {"error": "phase 2 not finished within 30s"}, 1)),
    ],
)
def test_judge_phase2_read(task, error, failed_reads, deadline_passed, expected):
    read = judge_phase2_read(
        task, error, failed_reads=failed_reads, read_retries=2, deadline_passed=deadline_passed, deadline_s=30
    )
    assert (read.status, read.fields, read.failed_reads) == expected
