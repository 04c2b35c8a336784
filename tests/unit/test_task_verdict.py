import pytest

from core.ov.models import TaskState
from core.ov.tasks import task_verdict


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
