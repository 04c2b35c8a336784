"""Commits of one OV user run side by side, and a lost extraction is repaired once
(workers.commits.run, workers.commits.repair), on a real Redis with the fake OV.

OV 0.5.2 merges the overlapping phase 2s of one user itself (docs/OV-NOTES.md); the real
OV's side of it (N sessions of one user committed together, every memory written; a model
that drops the merge, repaired) is tested in tests/integration/test_e2e_concurrency.py.
"""

from __future__ import annotations

import logging
import time

import httpx
import msgspec

from core.config import Settings
from core.events import CommitRequest, encode
from core.repair import repair_session_id
from core.session import SessionAddress
from workers.cli.status import format_status
from workers.commits import context as jobs
from workers.commits import repair as repair_module
from workers.commits.context import context_of
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.commits.repair import read_lost_extractions, run_check
from workers.commits.repair_pool import schedule_repair
from workers.commits.request import LEGACY_IN_LINE, request_commit
from workers.commits.run import run_commit
from workers.commits.sweep import sweep
from workers.commits.worker import drain_jobs
from workers.dev.fake_ov.app import FakeOV
from workers.status import COMMIT_STALL_S, read_scaling, read_status, stalled_commits
from workers.store.keys import Keys, session_keys


def _seed(fake: FakeOV, sid: str, text: str, api_key: str | None = None) -> None:
    headers = {"X-API-Key": api_key} if api_key else {}
    client = httpx.Client(transport=httpx.MockTransport(fake.handle), base_url="http://ov", headers=headers)
    msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": "noted"}]
    client.post(f"/api/v1/sessions/{sid}/messages/batch", json={"messages": msgs}).raise_for_status()


def _request(client, settings: Settings, sid: str, user: str | None = None) -> CommitRequest:
    return request_commit(client, settings, SessionAddress(sid, "main", user), reason="compact", keep_recent_count=0)


def _commit_calls(fake: FakeOV, sid: str) -> list[int]:
    return [i for i, r in enumerate(fake.requests) if r.url.path == f"/api/v1/sessions/{sid}/commit"]


def _final(client, settings, *requests):
    def done() -> bool:
        outcomes = [CommitRecords(client, settings).outcome(r) for r in requests]
        return all(o is not None and o.status in FINAL_STATUSES for o in outcomes)

    return done


def test_commits_of_one_user_reach_ov_before_any_of_them_is_final(redis_client, settings, fake_ov):
    fake_ov.phase2_reads_until_done = 2  # each phase 2 answers "running" twice first
    sids = ["s1", "s2", "s3"]
    for sid in sids:
        _seed(fake_ov, sid, f"I prefer tea number {sid}.")
    requests = [_request(redis_client, settings, sid) for sid in sids]
    records = CommitRecords(redis_client, settings)
    first_final: list[int] = []

    def all_final() -> bool:
        done = [records.outcome(r).status in FINAL_STATUSES for r in requests]
        if any(done) and not first_final:
            first_final.append(len(fake_ov.requests))
        return all(done)

    # what `openclaw ovstream import` waits on (GET /v1/scaling): the commits in flight
    assert read_scaling(redis_client, settings)["commits"]["inFlight"] == 3
    assert drain_jobs(redis_client, settings, until=all_final)
    assert [records.outcome(r).status for r in requests] == ["completed"] * 3
    assert read_scaling(redis_client, settings)["commits"]["inFlight"] == 0
    # every commit went to OV before the first one's outcome was final: nobody waited in a line
    assert all(_commit_calls(fake_ov, sid)[0] < first_final[0] for sid in sids), (first_final, fake_ov.requests)


def test_commits_of_different_tenants_run_together(redis_client, settings):
    keyed = FakeOV(api_keys={"key-a": ("acct", "alice"), "key-b": ("acct", "bob")})
    transport = keyed.transport()
    jobs.set_ov_transport_factory(lambda _s: transport)
    try:
        two = settings.model_copy(update={"user_api_keys": {"alice": "key-a", "bob": "key-b"}})
        _seed(keyed, "shared", "I prefer green tea.", "key-a")
        _seed(keyed, "shared", "I prefer black tea.", "key-b")
        alice, bob = _request(redis_client, two, "shared", "alice"), _request(redis_client, two, "shared", "bob")
        assert run_commit(redis_client, context_of(two), alice).status == "running"
        assert run_commit(redis_client, context_of(two), bob).status == "running"
        assert drain_jobs(redis_client, two, until=_final(redis_client, two, alice, bob))
    finally:
        jobs.set_ov_transport_factory(None)


def test_a_commit_an_earlier_release_left_in_its_tenants_line_is_run_quietly(redis_client, settings, fake_ov, caplog):
    _seed(fake_ov, "waited", "I prefer coffee.")
    request = _request(redis_client, settings, "waited")
    # as an earlier release left it: the slot names the line, and no job exists
    inflight = session_keys(settings, request.address).commit_inflight
    redis_client.hset(inflight, mapping={"req": encode(request), "job": LEGACY_IN_LINE})
    redis_client.delete(f"rq:job:{request.commit_id}")
    caplog.set_level(logging.INFO)
    redis_client.zadd(Keys(settings.key_prefix).commits_in_flight(), {inflight: 0})  # due for a look
    assert sweep(redis_client, settings) == 1  # the commit workers' sweep finds it
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, request))
    assert CommitRecords(redis_client, settings).outcome(request).status == "completed"
    assert "waited in its tenant's line (an earlier release)" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and request.commit_id in r.getMessage()]


def _commit_together(redis_client, settings, said: dict[str, str]) -> list[CommitRequest]:
    """Sessions of one user (seeded in the fake OV already) committed together: overlapping."""
    requests = [_request(redis_client, settings, sid) for sid in said]
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, *requests))
    return requests


def _pooled_repair(redis_client, settings, *requests: CommitRequest) -> CommitRequest:
    """The repair commit that took ``requests`` (their claims name one commit), once made."""
    keys = Keys(settings.key_prefix)

    def claimed() -> bool:
        return all(redis_client.exists(keys.extraction_repair(r.commit_id)) for r in requests)

    assert drain_jobs(redis_client, settings, until=claimed)
    named = {redis_client.get(keys.extraction_repair(r.commit_id)) for r in requests}
    assert len(named) == 1, named  # one repair for all of them
    lost = read_lost_extractions(redis_client, settings, newest=50)
    return next(e.repair for e, _, _ in lost.newest if e.commit_id == requests[0].commit_id)


def test_no_memory_beside_another_commit_is_extracted_again_alone_and_lost_only_if_that_finds_some(
    redis_client, settings, fake_ov, caplog
):
    said = {
        "lost": "We moved the launch to the ninth of March and Berta owns the budget.",
        "lost-too": "The vendor contract renews in June; Dieter negotiates it this time.",
    }
    caplog.set_level(logging.INFO)
    for sid, text in said.items():  # nothing the fake OV extracts: each phase 2 writes no memory
        _seed(fake_ov, sid, text)
    request, other = _commit_together(redis_client, settings, said)
    outcome = CommitRecords(redis_client, settings).outcome(request)
    assert (outcome.status, outcome.memories_extracted) == ("completed", 0)
    # both suspects wait for their user's repair, and one repair session takes both
    repair_request = _pooled_repair(redis_client, settings, request, other)
    assert repair_request.ov_session_id in {repair_session_id(r.commit_id) for r in (request, other)}
    repaired = CommitRecords(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=lambda: caplog.text.count("nothing had been lost") == 1)
    # the repair session holds both archives' user messages, written once, committed alone once
    repair = repair_request.address
    written = [r for r in fake_ov.requests if r.url.path == f"/api/v1/sessions/{repair.ov_session_id}/messages/batch"]
    assert len(written) == 1 and all(text in written[0].content.decode() for text in said.values())
    assert [o.status for o in repaired.list(repair)] == ["completed"]
    lost = read_lost_extractions(redis_client, settings)
    # alone, the fake OV extracts nothing from it either: nothing had been lost, no alarm
    assert lost.lost_total == 0 and lost.repairs == {"completed": 2}
    assert (lost.repairs_started, lost.suspects_waiting) == (1, 0)  # one more phase 2 for two suspects
    assert {entry.commit_id for entry, _, _ in lost.newest} == {request.commit_id, other.commit_id}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    # once per archive: looked at again, nothing more is written or committed
    assert run_check(redis_client, context_of(settings), request) == "already repaired"
    # a repair that does write memories alone shows the loss: counted once, said at WARNING
    verdict = repaired.outcome(repair_request)
    redis_client.hset(  # as if the repair's phase 2 had written memories
        session_keys(settings, repair).commits,
        repair_request.commit_id,
        encode(msgspec.structs.replace(verdict, memories_extracted=3)),
    )
    assert run_check(redis_client, context_of(settings), repair_request) == "lost, repaired"
    assert run_check(redis_client, context_of(settings), repair_request) == "loss counted already"
    assert read_lost_extractions(redis_client, settings).lost_total == 1
    assert "an extraction lost, now repaired" in caplog.text
    # the repair's own commit, which wrote no memory either, is not repaired in turn
    assert not redis_client.exists(Keys(settings.key_prefix).extraction_repair(repaired.list(repair)[0].commit_id))


def test_a_check_ov_cannot_give_the_archive_to_looks_again_and_its_suspect_is_repaired(
    redis_client, settings, fake_ov, caplog
):
    """OV away (or its own file read mid-write) when the check reads the archive: the check
    looks again later, so the lost extraction is still suspected and repaired (not dropped
    with a WARNING nobody acts on)."""
    once = settings.model_copy(update={"ov_retries": 0})
    caplog.set_level(logging.INFO)
    said = {"blip": "We moved the launch to the ninth of March.", "blip-too": "Dieter negotiates the contract."}
    for sid, text in said.items():
        _seed(fake_ov, sid, text)
    fake_ov.fail_next(2, status=503, route="get_archive")  # each check's first read
    requests = _commit_together(redis_client, once, said)
    _pooled_repair(redis_client, once, *requests)
    assert caplog.text.count("to check its extraction") == 2 and "looking again in" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_a_users_repairs_keep_to_its_hourly_budget_and_the_suspects_wait_not_lost(
    redis_client, settings, fake_ov, caplog
):
    settings = settings.model_copy(update={"extraction_repairs_per_hour": 1})
    caplog.set_level(logging.INFO)
    said = "We moved the launch to the ninth of March and Berta owns the budget."
    for sid in ("a1", "a2", "b1", "b2"):
        _seed(fake_ov, sid, said)
    first = _commit_together(redis_client, settings, {"a1": "", "a2": ""})
    _pooled_repair(redis_client, settings, *first)
    assert drain_jobs(redis_client, settings, until=lambda: "nothing had been lost" in caplog.text)
    # a second pair of the same user: suspected, and waiting for the hour's budget
    second = _commit_together(redis_client, settings, {"b1": "", "b2": ""})
    assert drain_jobs(
        redis_client, settings, until=lambda: "wait" in caplog.text and "hourly repair budget" in caplog.text
    )
    keys = Keys(settings.key_prefix)
    assert not any(redis_client.exists(keys.extraction_repair(r.commit_id)) for r in second)
    lost = read_lost_extractions(redis_client, settings)
    assert (lost.repairs_started, lost.suspects_waiting) == (1, 2)
    assert "waiting for their user's repair: 2" in format_status(read_status(redis_client, settings))
    # the hour over (its start forgotten), the waiting pair is repaired together (not waiting the
    # hour for the job that would look then)
    redis_client.delete(keys.extraction_repair_starts("-"))
    schedule_repair(redis_client, settings, second[0], 0)
    _pooled_repair(redis_client, settings, *second)
    assert read_lost_extractions(redis_client, settings).repairs_started == 2


def test_repairs_off_leave_the_suspects_counted(redis_client, settings, fake_ov):
    settings = settings.model_copy(update={"extraction_repairs_per_hour": 0})
    for sid in ("off1", "off2"):
        _seed(fake_ov, sid, "The vendor contract renews in June; Dieter negotiates it this time.")
    _commit_together(redis_client, settings, {"off1": "", "off2": ""})
    assert drain_jobs(
        redis_client, settings, until=lambda: read_lost_extractions(redis_client, settings).suspects_waiting == 2
    )
    assert drain_jobs(redis_client, settings)  # nothing left to run: no repair made
    assert read_lost_extractions(redis_client, settings).repairs_started == 0


def test_a_lone_commit_that_wrote_nothing_had_nothing_to_lose(redis_client, settings, fake_ov):
    # OV merges only a batch that spans sessions: a phase 2 alone cannot lose to the merge
    _seed(fake_ov, "alone", "Please list the files in the project's build directory for me.")
    [request] = _commit_together(redis_client, settings, {"alone": ""})
    assert run_check(redis_client, context_of(settings), request) == "alone: nothing a merge could lose"
    assert read_lost_extractions(redis_client, settings).lost_total == 0


def test_a_commit_whose_user_said_nothing_substantive_is_not_repaired(redis_client, settings, fake_ov):
    for sid in ("greeting", "greeting-too"):
        _seed(fake_ov, sid, "hi there")
    request, _ = _commit_together(redis_client, settings, {"greeting": "", "greeting-too": ""})
    assert run_check(redis_client, context_of(settings), request) == "nothing lost"
    assert read_lost_extractions(redis_client, settings).lost_total == 0


def test_status_says_when_commits_wait_with_nothing_moving_them(redis_client, settings, fake_ov):
    _seed(fake_ov, "stalled", "I prefer cocoa.")
    request = _request(redis_client, settings, "stalled")
    # no worker runs: the commit's job sits queued; asked for an hour ago, status says so
    stuck = read_status(redis_client, settings)
    assert stuck.commits_in_flight == 1 and stuck.oldest_commit_s < COMMIT_STALL_S
    assert stuck.commits_stalled is None  # just asked for: nothing to say yet
    later = stalled_commits(3600.0, f"{request.commit_id} of session stalled", stuck.commit_jobs, stuck.processes)
    assert later is not None and request.commit_id in later and "no commit worker is live" in later
    redis_client.hset(
        session_keys(settings, request.address).commit_inflight,
        "req",
        encode(msgspec.structs.replace(request, requested_at=time.time() - 3600)),
    )
    said = read_status(redis_client, settings)
    assert said.oldest_commit_s > 3500 and said.commits_stalled is not None
    assert request.commit_id in format_status(said) and "PROBLEM: commits wait" in format_status(said)
    assert drain_jobs(redis_client, settings, until=_final(redis_client, settings, request))
    assert read_status(redis_client, settings).oldest_commit_s == 0.0  # final: none in flight


def test_a_repair_that_wrote_nothing_beside_another_commit_of_its_user_is_tried_again_in_a_fresh_session(
    redis_client, settings, fake_ov, caplog, monkeypatch
):
    caplog.set_level(logging.INFO)
    for sid in ("again1", "again2"):
        _seed(fake_ov, sid, "We moved the launch to the ninth of March and Berta owns the budget.")
    suspects = _commit_together(redis_client, settings, {"again1": "", "again2": ""})
    repair = _pooled_repair(redis_client, settings, *suspects)
    records = CommitRecords(redis_client, settings)
    assert drain_jobs(redis_client, settings, until=lambda: records.outcome(repair).status in FINAL_STATUSES)
    # another commit of the user ran while the repair did: its empty result proves nothing
    monkeypatch.setattr(repair_module, "_others", lambda *_: [(repair.requested_at, None)])
    assert run_check(redis_client, context_of(settings), repair) == "inconclusive: suspected again"
    assert read_lost_extractions(redis_client, settings).suspects_waiting == 2
    assert run_check(redis_client, context_of(settings), repair) == "inconclusive: suspected again"  # idempotent
    assert read_lost_extractions(redis_client, settings).suspects_waiting == 2
    monkeypatch.undo()
    second = _pooled_repair(redis_client, settings, *suspects)
    assert second.ov_session_id in {repair_session_id(r.commit_id, 1) for r in suspects}  # its second try
    assert second.ov_session_id != repair.ov_session_id
    assert read_lost_extractions(redis_client, settings).repairs_started == 2
