"""memory_store keeps no secret (core.redaction): masked as a turn's would be, or, under
``drop``, not stored at all. Real redis-server, FakeOV."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rpc.test_tools import call

pytestmark = pytest.mark.redis


async def test_memory_store_keeps_no_secret(rpc: Any, commit_worker: None) -> None:
    aws = "AKIA" + "IOSFODNN7EXAMPLE"
    r = await rpc.tool("memory_store", call({"text": f"I prefer dark roast; my key is {aws}", "sessionId": "n2"}))
    assert r.json()["details"]["action"] == "stored"
    [message] = [m for archive in rpc.fake.sessions["n2"].archives for m in archive.messages] or rpc.fake.sessions[
        "n2"
    ].messages
    assert aws not in str(message) and "<redacted:aws_access_key#1>" in str(message)


async def test_memory_store_of_a_secret_under_drop_stores_nothing(make_rpc: Any, fake: Any) -> None:
    rpc = await make_rpc(fake, redaction="drop")
    withheld = await rpc.tool("memory_store", call({"text": "key " + "AKIA" + "IOSFODNN7EXAMPLE", "sessionId": "n3"}))
    assert withheld.json()["details"] == {"action": "withheld", "kinds": ["aws_access_key"]}
    assert "n3" not in rpc.fake.sessions
