"""What capture did with each import of one run of ``openclaw ovstream import``, as the run
asks the RPC for it (``POST /v1/import/outcomes``): written into a session OV held none of,
already there (captured before, or a rerun), partly there (an interrupted write of it
finished), or pending; a run reads only its own records, and a tenant only its own."""

from __future__ import annotations

import time
from typing import Any

from core.events import TurnEvent
from tests.helpers.capture import make_worker, ov_texts, publish, turn
from workers.capture.imports import import_records
from workers.capture.plan import Entry, Unit, plan_round, session_of
from workers.rpc.imports import IMPORTS_ASKED_MAX
from workers.store.applied import AppliedState


def _import(session: str, texts: list[str], run: str) -> TurnEvent:
    return TurnEvent(
        event_id=f"import-{session}",
        session_id=session,
        import_transcript=True,
        import_run=run,
        messages=[{"role": "user", "content": t} for t in texts],
        published_at=time.time(),
    )


def _asked(sessions: list[str], run: str) -> dict[str, Any]:
    return {"run": run, "sessions": [{"sessionId": s, "eventId": f"import-{s}"} for s in sessions]}


async def test_a_run_hears_what_capture_did_with_each_of_its_imports(redis_client, settings, fake_ov, make_rpc) -> None:
    publish(redis_client, settings, [turn("live", 0)])  # a session captured before the import
    await make_worker(settings, fake_ov, burst=True).run()
    publish(
        redis_client,
        settings,
        [_import("fresh", ["one", "two", "three"], "run-1"), _import("live", ["old"], "run-1")],
    )
    await make_worker(settings, fake_ov, burst=True).run()
    assert ov_texts(fake_ov, "fresh") == ["one", "two", "three"]
    rpc = await make_rpc(fake_ov, **{k: getattr(settings, k) for k in ("key_prefix", "shards")})
    answer = await rpc.client.post("/v1/import/outcomes", json=_asked(["fresh", "live", "never"], "run-1"))
    assert answer.status_code == 200, answer.text
    said = {o["eventId"]: (o["outcome"], o["messages"], o["known"]) for o in answer.json()["outcomes"]}
    assert said == {
        "import-fresh": ("written", 3, True),
        "import-live": ("already", 0, True),  # capture had applied a turn of it: the import writes nothing
        "import-never": ("pending", 0, False),  # a dry run reads this as new to ovstream
    }
    # The same run asked by another run: nothing of it is that run's.
    other = await rpc.client.post("/v1/import/outcomes", json=_asked(["fresh"], "run-2"))
    assert other.json()["outcomes"][0]["outcome"] == "pending"
    # A rerun sends the same event id again: already there, and said so to the rerun.
    publish(redis_client, settings, [_import("fresh", ["one", "two", "three"], "run-2")])
    await make_worker(settings, fake_ov, burst=True).run()
    again = await rpc.client.post("/v1/import/outcomes", json=_asked(["fresh"], "run-2"))
    said_again = again.json()["outcomes"][0]
    assert said_again == {"eventId": "import-fresh", "outcome": "already", "messages": 0, "known": True}
    assert ov_texts(fake_ov, "fresh") == ["one", "two", "three"]  # once


async def test_another_tenant_reads_none_of_them(redis_client, settings, fake_ov, make_rpc) -> None:
    publish(redis_client, settings, [_import("mine", ["a"], "run-1")])
    await make_worker(settings, fake_ov, burst=True).run()
    rpc = await make_rpc(
        fake_ov, key_prefix=settings.key_prefix, shards=settings.shards, user_api_keys={"acme": "acme-key"}
    )
    theirs = await rpc.client.post(
        "/v1/import/outcomes", json=_asked(["mine"], "run-1"), headers={"X-OpenViking-API-Key": "acme-key"}
    )
    assert theirs.json()["outcomes"][0]["outcome"] == "pending"  # another tenant's address
    ours = await rpc.client.post("/v1/import/outcomes", json=_asked(["mine"], "run-1"))
    assert ours.json()["outcomes"][0]["outcome"] == "written"


def test_an_import_finished_after_an_interrupted_write_is_partly_there(settings) -> None:
    event = _import("cut", ["one", "two", "three"], "run-1")
    entry = Entry("5-0", b"", event=event, session=session_of(settings, event))
    state = AppliedState()
    state.partial_id, state.partial_skip = "5-0", 2  # two of its messages reached OV before a crash
    plan = plan_round(settings, entry.session, [entry], state)
    assert [u.ov_count for u in plan.units] == [1]
    [write] = import_records(settings, plan)
    assert '"outcome":"partly"' in write.set["import-cut"] and '"messages":1' in write.set["import-cut"]
    replayed = plan_round(settings, entry.session, [entry], state)
    replayed.units = [Unit(entry, [], "applied before")]
    assert import_records(settings, replayed) == []  # an entry read again keeps the record it has


async def test_more_sessions_than_a_page_are_refused(settings, fake_ov, make_rpc) -> None:
    rpc = await make_rpc(fake_ov, **{k: getattr(settings, k) for k in ("key_prefix", "shards")})
    page = [f"s{i}" for i in range(IMPORTS_ASKED_MAX)]
    assert (await rpc.client.post("/v1/import/outcomes", json=_asked(page, "run-1"))).status_code == 200
    over = await rpc.client.post("/v1/import/outcomes", json=_asked([*page, "one-more"], "run-1"))
    assert over.status_code == 422 and "sessions" in over.text
