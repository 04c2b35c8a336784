"""End to end on the real openviking-server 0.5.2: the memory tools over the RPC.

memory_store writes a preference through a commit the service's RQ worker runs
(phase 2 extracts it); memory_recall and memory_search then find it; memory_forget
by URI deletes it, after which recall no longer returns it.
"""

from __future__ import annotations

import pytest

from tests.helpers.e2e import Service, wait_for

pytest_plugins = ("tests.helpers.e2e_fixtures",)

STATED = "I prefer saffron risotto with wild mushrooms on rainy evenings."
QUERY = "saffron risotto with wild mushrooms"
TOPIC_FILE = "/memories/preferences/default/saffron_risotto_wild.md"


def _recalled_uris(service: Service) -> list[str]:
    result = service.tool("memory_recall", {"query": QUERY})
    return [m["uri"] for m in result["details"].get("memories", [])]


@pytest.fixture(scope="module")
def stored(e2e_service: Service) -> dict:
    """memory_store's answer, once the stored memory is searchable."""
    answer = e2e_service.tool("memory_store", {"text": STATED})
    if answer["details"].get("action") == "stored":
        # OV indexes a new memory for search shortly after phase 2 completes
        wait_for(
            lambda: any(u.endswith(TOPIC_FILE) for u in _recalled_uris(e2e_service)),
            "the stored memory becoming searchable",
        )
    return answer


def test_memory_store_commits_and_extracts(stored: dict) -> None:
    details = stored["details"]
    assert details["action"] == "stored", stored
    assert details["status"] == "completed" and details["usedTempSession"] is True
    assert details["memoriesCount"] >= 1 and details["archived"] is True
    assert details["sessionId"] in stored["content"][0]["text"]


def test_memory_recall_finds_the_stored_memory(e2e_service: Service, stored: dict) -> None:
    result = e2e_service.tool("memory_recall", {"query": QUERY})
    [hit] = [m for m in result["details"]["memories"] if m["uri"].endswith(TOPIC_FILE)]
    assert hit["level"] == 2
    text = result["content"][0]["text"]
    assert STATED in text and hit["uri"] in text  # the full memory is read, with its URI


def test_memory_search_finds_it_under_the_memories_uri(e2e_service: Service, stored: dict) -> None:
    result = e2e_service.tool("memory_search", {"query": QUERY, "uri": "viking://~/memories"})
    rows = [r for r in result["details"]["results"] if r["uri"].endswith(TOPIC_FILE)]
    assert rows and rows[0]["type"] == "memory", result
    assert rows[0]["uri"] in result["content"][0]["text"]


def test_memory_forget_by_uri_deletes_it(e2e_service: Service, stored: dict) -> None:
    [uri] = [u for u in _recalled_uris(e2e_service) if u.endswith(TOPIC_FILE)]
    refused = e2e_service.tool("memory_forget", {"uri": "viking://resources/not-a-memory"})
    assert refused["details"]["action"] == "rejected"
    # A way out of the memories spelled with escapes: refused, nothing sent to OV.
    escaped = e2e_service.http.post(
        "/v1/tools/memory_forget",
        json={"params": {"uri": "viking://~/memories/%2e%2e/%2e%2e/%2e%2e/resources/x"}},
    )
    assert escaped.status_code == 422 and escaped.json()["error"]["field"] == "params.uri"
    # The memory spelled with a detour and escapes: OV deletes the canonical URI and says so.
    folder, name = uri.rsplit("/", 1)
    forgotten = e2e_service.tool("memory_forget", {"uri": f"{folder}/x/%2e%2e/./{name}"})
    details = forgotten["details"]
    assert details["action"] == "deleted" and details["uri"] == uri and details["deleted"] >= 1, forgotten
    wait_for(lambda: uri not in _recalled_uris(e2e_service), "the forgotten memory leaving recall")
    result = e2e_service.tool("memory_recall", {"query": QUERY})
    assert STATED not in result["content"][0]["text"]
    # Forgotten twice: OV removed nothing, and the answer says so.
    again = e2e_service.tool("memory_forget", {"uri": uri})
    assert again["details"]["action"] == "not_found" and again["details"]["deleted"] == 0, again
