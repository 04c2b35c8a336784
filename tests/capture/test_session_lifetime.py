"""A session's state in Redis has a lifetime (``sessionStateTtlS``), and a session that comes back
after its state went is handled exactly once: capture writes nothing twice, its next commit
takes a job id no earlier one used, a parked session's state waits for its operator."""

from __future__ import annotations

import time

from core.events import TurnEvent
from core.session import SessionAddress
from tests.helpers.capture import expected_texts, make_worker, ov_texts, publish, turn
from workers.commits.records import FINAL_STATUSES, CommitRecords
from workers.commits.request import request_commit
from workers.commits.worker import drain_jobs
from workers.store.keys import session_keys


def _import(session: str, texts: list[str], event_id: str) -> TurnEvent:
    return TurnEvent(
        event_id=event_id,
        session_id=session,
        import_transcript=True,
        messages=[{"role": "user", "content": t} for t in texts],
        published_at=time.time(),
    )


def _expire_state(redis_client, settings, session: str) -> None:
    """What ``sessionStateTtlS`` does to an idle session: its applied offset and commit records go."""
    ks = session_keys(settings, SessionAddress(session, "main"))
    redis_client.delete(ks.applied, ks.commits, ks.commit_generation)


async def test_capture_state_lives_session_state_ttl_from_each_write(redis_client, settings, fake_ov):
    publish(redis_client, settings, [turn("ttl", 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    ttl_ms = redis_client.pttl(session_keys(settings, SessionAddress("ttl", "main")).applied)
    assert settings.session_state_ttl_s * 1000 - 60_000 < ttl_ms <= settings.session_state_ttl_s * 1000


async def test_a_session_resumed_after_its_state_expired_writes_nothing_twice(redis_client, settings, fake_ov):
    publish(redis_client, settings, [_import("back", ["old one", "old two"], "import-1"), turn("back", 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    _expire_state(redis_client, settings, "back")
    # It comes back: a new gateway imports it again (its marker lost), then a backlog of turns
    # waits while capture is away, each carrying the whole transcript, as afterTurn does.
    again = _import("back", ["old one", "old two", "back:q0", "back:a0"], "import-2")
    publish(redis_client, settings, [again, *(turn("back", i) for i in range(1, 4))])
    worker = make_worker(settings, fake_ov, burst=True)
    await worker.run()
    assert ov_texts(fake_ov, "back") == ["old one", "old two", *expected_texts("back", 4)]
    assert worker.stats.ov_writes >= 1  # the turns went on; the import did not


async def test_an_import_into_a_session_new_to_ov_is_still_written(redis_client, settings, fake_ov):
    publish(redis_client, settings, [_import("fresh", ["from before ovstream"], "import-fresh")])
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "fresh") == ["from before ovstream"]


async def test_a_commit_after_the_state_expired_takes_a_job_id_never_used(redis_client, settings, fake_ov):
    address = SessionAddress("again", "main")
    publish(redis_client, settings, [turn("again", 0)])
    await make_worker(settings, fake_ov, burst=True).run()
    records = CommitRecords(redis_client, settings)

    def final(request) -> bool:
        return (o := records.outcome(request)) is not None and o.status in FINAL_STATUSES

    first = request_commit(redis_client, settings, address, reason="compact", keep_recent_count=0)
    assert drain_jobs(redis_client, settings, until=lambda: final(first))
    ks = session_keys(settings, address)
    assert 0 < redis_client.ttl(ks.commit_generation) <= settings.session_state_ttl_s
    assert 0 < redis_client.ttl(ks.commits) <= settings.session_state_ttl_s
    _expire_state(redis_client, settings, "again")
    publish(redis_client, settings, [turn("again", 1)])  # it comes back, and commits again
    await make_worker(settings, fake_ov, burst=True).run()
    second = request_commit(redis_client, settings, address, reason="compact", keep_recent_count=0)
    # RQ keeps a failed job's id for a year: a counter starting over at 1 could meet it
    assert second.commit_id != first.commit_id and second.generation > first.generation
    assert drain_jobs(redis_client, settings, until=lambda: final(second))
    assert records.outcome(second).status == "completed"
    assert ov_texts(fake_ov, "again") == expected_texts("again", 2)
