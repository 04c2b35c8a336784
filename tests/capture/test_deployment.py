"""A process whose ``shards`` differ from its deployment's refuses to start (workers.store.deployment):
with another count it would read and write other streams and records than the rest."""

from __future__ import annotations

import pytest

from tests.helpers.capture import cli_uses, make_worker
from workers.cli import main
from workers.store.deployment import DeploymentMismatch, check_deployment
from workers.store.keys import Keys


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
