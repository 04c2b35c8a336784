"""End to end on the real openviking-server 0.5.2: a phase-2 failure is recorded.

The model server answers garbage (``model_mode``), so OV's memory extraction
cannot parse it and the commit's phase-2 task fails. OV itself keeps no trace of
that once a later commit succeeds (docs/OV-NOTES.md): ovstream's commit record
and ``ovstream commits`` must.
"""

from __future__ import annotations

from tests.helpers.e2e import (
    Conversation,
    OVSession,
    Service,
    check_crosses_at_last_turn,
    commit_rows,
)

pytest_plugins = ("tests.helpers.e2e_fixtures",)

LIBRARY = [
    (
        "The reading club meets on the first Tuesday of every month in the back room of the library.",
        "First Tuesday of each month, back room of the library. Shall I note the next date for you?",
    ),
    (
        "Yes. This month we discuss the lighthouse novel, chapters one to nine, and Anna brings the biscuits.",
        "Noted: the lighthouse novel, chapters one to nine, and Anna brings the biscuits this month.",
    ),
    (
        "Next month the club reads the travel diary about the northern railway, all twelve chapters of it.",
        "Next month: the travel diary about the northern railway, all twelve chapters.",
    ),
    (
        "Please also remind everyone that the library closes at nine, so the meeting ends by half past eight.",
        "Reminder drafted: the library closes at nine, so the meeting ends by half past eight.",
    ),
    (
        "And the room needs to be booked again for the autumn, from September to December, every first Tuesday.",
        "I will ask the library to book the back room from September to December, every first Tuesday.",
    ),
    (
        (
            "Last point: the club wants a short newsletter after each meeting, with the chapters discussed, the "
            "next date and who brings the biscuits."
        ),
        (
            "Understood: after each meeting a short newsletter goes out listing the chapters discussed, the date "
            "of the next meeting and who brings the biscuits."
        ),
    ),
]


def test_a_failed_phase_2_is_recorded_and_survives_a_later_success(
    e2e_service: Service, dev_ov: OVSession, model_mode
) -> None:
    check_crosses_at_last_turn(LIBRARY)
    conv = Conversation("failing")
    model_mode("garbage")  # before the threshold commit: its phase 2 must fail
    for user_text, assistant_text in LIBRARY:
        e2e_service.publish(conv.turn(user_text, assistant_text))
    [failed] = e2e_service.wait_commits(conv, 1)
    assert failed.status == "failed", failed
    assert failed.reason == "threshold" and failed.archive_uri.endswith("/archive_001")
    assert failed.task_id and failed.error and "parse" in failed.error, failed.error
    assert dev_ov.context(conv.ov_session_id)["stats"]["failedArchives"] == 1

    out = e2e_service.commits_cli(conv)
    [row] = commit_rows(out)
    assert (row["REASON"], row["STATUS"], row["ARCHIVE"]) == ("threshold", "failed", "archive_001")
    assert row["ERROR"] != "-" and row["ERROR"] in failed.error.replace("\n", " ")

    # compact while the model is still broken: ok false, the failure reported
    broken = e2e_service.post("/v1/compact", conv.ref)
    assert broken["ok"] is False and broken["compacted"] is False, broken
    # the kept turn was archived by this compact (archive_002), so its phase 2 ran and failed
    assert broken["reason"] == "commit_failed"
    assert broken["result"]["details"]["commit"]["status"] == "failed"

    # the model recovers; a new turn and a compact succeed, and OV forgets the failure...
    model_mode("normal")
    conv_event = conv.turn(
        "The club also needs a new notebook for the minutes.",
        "I will buy a new notebook for the minutes before the next meeting.",
    )
    e2e_service.publish(conv_event)
    dev_ov.wait_total_messages(conv.ov_session_id, len(conv.messages))
    ok = e2e_service.post("/v1/compact", conv.ref)
    assert (ok["ok"], ok["compacted"], ok["reason"]) == (True, True, "commit_completed"), ok
    assert ok["result"]["firstKeptEntryId"] == "archive_003"
    assert dev_ov.context(conv.ov_session_id)["stats"]["failedArchives"] == 0

    # ...but ovstream's record keeps both failures
    outcomes = e2e_service.commits(conv)
    assert [(o.reason, o.status) for o in outcomes] == [
        ("threshold", "failed"),
        ("compact", "failed"),
        ("compact", "completed"),
    ]
    rows = commit_rows(e2e_service.commits_cli(conv))
    assert [(r["STATUS"], r["ARCHIVE"]) for r in rows] == [
        ("failed", "archive_001"),
        ("failed", "archive_002"),
        ("completed", "archive_003"),
    ]
