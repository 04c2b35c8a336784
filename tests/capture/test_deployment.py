"""A process whose ``shards`` differ from its deployment's refuses to start (workers.store.deployment):
with another count it would read and write other streams and records than the rest."""

from __future__ import annotations

import pytest

from tests.helpers.capture import cli_uses, make_worker
from workers.cli import main
from workers.store import schema
from workers.store.deployment import DeploymentMismatch, check_deployment
from workers.store.keys import Keys
from workers.store.schema import STORE_SCHEMA, UNRECORDED_SCHEMA, stored_schema


def test_the_first_process_records_the_count_and_the_same_count_passes(redis_client, settings):
    check_deployment(redis_client, settings)
    assert redis_client.hget(Keys(settings.key_prefix).deployment(), "shards") == b"4"
    check_deployment(redis_client, settings)  # again, and as every later process with 4 does
    with pytest.raises(DeploymentMismatch, match=r"shards = 8, but .* runs with shards = 4"):
        check_deployment(redis_client, settings.model_copy(update={"shards": 8}))
    other = settings.model_copy(update={"shards": 8, "key_prefix": settings.key_prefix + "-b"})
    check_deployment(redis_client, other)  # another deployment on the same Redis has its own


async def test_a_capture_worker_with_another_count_stops_at_once(redis_client, settings, fake_ov):
    check_deployment(redis_client, settings)
    worker = make_worker(settings.model_copy(update={"shards": 2}), fake_ov)
    with pytest.raises(DeploymentMismatch):
        await worker.run()
    assert not redis_client.exists(Keys(settings.key_prefix).stream(0))  # no group made, no shard taken
    assert not worker.consumers


@pytest.mark.parametrize("command", [["worker"], ["rpc", "--port", "1"], ["capture", "--burst"]])
def test_the_processes_exit_2_naming_both_counts(redis_client, settings, monkeypatch, caplog, command):
    check_deployment(redis_client, settings)
    cli_uses(monkeypatch, settings)
    monkeypatch.setenv("OVSTREAM_SHARDS", "6")
    assert main(command) == 2
    assert "shards = 6, but this deployment" in caplog.text and "runs with shards = 4" in caplog.text


# --- the layout of what Redis holds (workers.store.schema, `ovstream migrate`) -----------------


def test_a_new_deployment_records_this_releases_layout_and_an_old_one_reads_as_the_first(redis_client, settings):
    key = Keys(settings.key_prefix).deployment()
    check_deployment(redis_client, settings)
    assert int(redis_client.hget(key, "schema")) == STORE_SCHEMA
    old = settings.model_copy(update={"key_prefix": settings.key_prefix + "-old"})
    redis_client.hset(Keys(old.key_prefix).deployment(), "shards", 4)  # as 0.2.0 recorded it
    assert stored_schema(redis_client, old) == UNRECORDED_SCHEMA
    check_deployment(redis_client, old)  # layout 1 is this release's: runs, and records nothing new
    assert redis_client.hget(Keys(old.key_prefix).deployment(), "schema") is None


@pytest.mark.parametrize(("recorded", "says"), [(STORE_SCHEMA + 1, "newer than this release"), (0, "ovstream migrate")])
@pytest.mark.parametrize("command", [["worker"], ["rpc", "--port", "1"], ["capture", "--burst"]])
def test_a_process_refuses_a_layout_it_does_not_read(
    redis_client, settings, monkeypatch, caplog, command, recorded, says
):
    redis_client.hset(Keys(settings.key_prefix).deployment(), mapping={"shards": 4, "schema": recorded})
    cli_uses(monkeypatch, settings)
    assert main(command) == 2
    assert f"holds layout {recorded}" in caplog.text and says in caplog.text


def test_migrate_steps_once_each_and_resumes_after_a_crash(redis_client, settings, monkeypatch, capsys):
    key = Keys(settings.key_prefix).deployment()
    moved: list[int] = []

    def step_2(client, s):
        """rename a (made-up) key family"""
        moved.append(2)
        return 3

    def step_3(client, s):
        moved.append(3)
        if moved.count(3) == 1:
            raise RuntimeError("killed midway")
        return 1

    monkeypatch.setattr(schema, "STORE_SCHEMA", 3)
    monkeypatch.setattr(schema, "MIGRATIONS", {2: step_2, 3: step_3})
    redis_client.hset(key, mapping={"shards": 4})  # a deployment from before layouts: layout 1
    said: list[str] = []
    assert schema.migrate(redis_client, settings, dry_run=True, say=said.append) == 1
    assert moved == [] and "rename a (made-up) key family" in said[0]
    with pytest.raises(RuntimeError):
        schema.migrate(redis_client, settings, say=said.append)
    assert int(redis_client.hget(key, "schema")) == 2  # step 2 recorded done, step 3 not
    assert schema.migrate(redis_client, settings, say=said.append) == 3  # resumed at step 3
    assert moved == [2, 3, 3] and int(redis_client.hget(key, "schema")) == 3
    assert schema.migrate(redis_client, settings, say=said.append) == 3 and moved == [2, 3, 3]  # idempotent


def test_ovstream_migrate_says_what_it_did_and_refuses_a_newer_layout(redis_client, settings, monkeypatch, capsys):
    cli_uses(monkeypatch, settings)
    assert main(["migrate"]) == 0
    assert "no deployment" in capsys.readouterr().out
    check_deployment(redis_client, settings)
    assert main(["migrate", "--dry-run"]) == 0
    assert f"layout {STORE_SCHEMA}: nothing to migrate" in capsys.readouterr().out
    redis_client.hset(Keys(settings.key_prefix).deployment(), "schema", STORE_SCHEMA + 1)
    assert main(["migrate"]) == 2
    assert "newer than this release" in capsys.readouterr().err
