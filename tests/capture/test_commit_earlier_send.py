"""A commit run again while an earlier send of it may still land in OV sends it no second time.

A worker whose beat lapsed (a starved machine; here, as a frozen process would leave it) is
taken for dead and its commit resumed on another, while it may be alive and waiting on OV. OV's
commit has no idempotency key: a second send archives what came since, an archive no record
names (the upgrade tier's ledger once missed nine turns so). The record says when phase 1 was
sent with no answer since (``phase1_sent_at``); the run again reads OV's count until that send
lands or its deadline passes (workers.commits.ov_steps.count_after_earlier_send)."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest

from core.ov import calls
from core.ov.envelope import OVError
from core.ov.sync_client import OVSyncClient
from core.session import SessionAddress
from workers.commits import context as jobs
from workers.commits.context import context_of
from workers.commits.records import CommitRecords, outcome_of
from workers.commits.request import request_commit
from workers.commits.run import record_outcome, run_commit
from workers.dev.fake_ov.app import FakeOV

TIMEOUT_S = 3.0
"""The deployment's ``ov_timeout_s`` here: an earlier send's deadline is this (and a grace) on."""


def _commit_calls(fake: FakeOV) -> int:
    return sum(1 for method, path in fake.calls if method == "POST" and path.endswith("/commit"))


@pytest.fixture
def seeded(redis_client, settings, fake_ov):
    """A session with messages, its commit asked for and recorded as sent just now, unanswered
    (as a worker frozen after its send leaves it), OV's count still 0."""
    settings = settings.model_copy(update={"ov_timeout_s": TIMEOUT_S})
    ov = OVSyncClient("http://ov", transport=fake_ov.transport())
    ov.send(calls.Call("POST", "/api/v1/sessions/s/messages/batch", options={"json": {"messages": _messages(4)}}))
    request = request_commit(
        redis_client, settings, SessionAddress("s", "main", None), reason="manual", keep_recent_count=0
    )
    return settings, ov, request


def _messages(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(n)]


def test_a_commit_run_again_while_its_send_is_in_ovs_hands_waits_for_it_and_adopts_it(
    redis_client, fake_ov, seeded, caplog
):
    settings, ov, request = seeded
    sent = outcome_of(request, "running", ov_commits_before=0, phase1_sent_at=time.time())
    record_outcome(redis_client, settings, request, sent)

    def earlier_send_lands() -> None:  # the frozen worker's send, taken by OV a moment later
        time.sleep(0.5)
        ov.send(calls.commit("s", keep_recent_count=0, enable_working_memory=True))

    landing = threading.Thread(target=earlier_send_lands)
    landing.start()
    with caplog.at_level(logging.INFO, logger="workers.commits.ov_steps"):
        outcome = run_commit(redis_client, context_of(settings), request)
    landing.join()
    assert _commit_calls(fake_ov) == 1, fake_ov.calls  # the earlier send's only
    assert fake_ov.sessions["s"].commit_count == 1
    assert outcome.status == "running" and outcome.task_id  # adopted: its phase 2 is followed
    assert "waiting up to" in caplog.text and "took an earlier send of it" in caplog.text


def test_a_commit_run_again_after_its_sends_deadline_sends_at_once(redis_client, fake_ov, seeded, caplog):
    settings, _, request = seeded
    lapsed = time.time() - TIMEOUT_S - 10  # sent long ago, never answered, never taken: it is over
    record_outcome(
        redis_client, settings, request, outcome_of(request, "running", ov_commits_before=0, phase1_sent_at=lapsed)
    )
    with caplog.at_level(logging.INFO, logger="workers.commits.ov_steps"):
        outcome = run_commit(redis_client, context_of(settings), request)
    assert _commit_calls(fake_ov) == 1 and fake_ov.sessions["s"].commit_count == 1
    assert outcome.status == "running" and outcome.task_id
    assert "waiting up to" not in caplog.text


@pytest.mark.parametrize(
    ("failure", "over"),
    [
        ({"status": 500, "code": "INTERNAL"}, True),  # answered: the send is over
        ("connect", True),  # never reached OV
        ("read-timeout", False),  # sent, no answer: it may still land
    ],
    ids=["answered-500", "not-connected", "read-timeout"],
)
def test_a_failed_send_says_whether_it_may_still_land(redis_client, fake_ov, seeded, failure, over):
    """What the record keeps of a send that failed: an answer (or no connection at all) clears
    ``phase1_sent_at``, so RQ's next try sends at once; a send with no answer keeps it."""
    settings, _, request = seeded
    if isinstance(failure, dict):
        fake_ov.fail_next(1, route="commit", **failure)
    else:
        error = httpx.ConnectError("refused") if failure == "connect" else httpx.ReadTimeout("slow")
        handle = fake_ov.handle

        def failing(req: httpx.Request):  # the commit's send fails so; every other call answers
            if req.url.path.endswith("/commit"):
                raise error
            return handle(req)

        jobs.set_ov_transport_factory(lambda _s: httpx.MockTransport(failing))  # the fixture resets it
    with pytest.raises(OVError):
        run_commit(redis_client, context_of(settings), request, may_retry=True)
    recorded = CommitRecords(redis_client, settings).outcome(request)
    assert recorded.status == "running" and recorded.ov_commits_before == 0
    assert (recorded.phase1_sent_at is None) is over, recorded
