"""Which queue Redis a session's commits go to (core.queue_routing), the settings that list
them (``queueRedisUrls``) and which of them a worker serves (``--queue``)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from core.config import Settings
from core.queue_routing import queue_index
from workers.commits.more_queues import served_queues

SESSION = st.text(min_size=1, max_size=40)


@given(SESSION, SESSION, st.integers(min_value=1, max_value=16))
def test_a_session_has_one_queue_of_those_there_are(scope: str, session: str, queues: int) -> None:
    index = queue_index(scope, session, queues)
    assert 0 <= index < queues and index == queue_index(scope, session, queues)


@given(SESSION, SESSION, st.integers(min_value=1, max_value=15))
def test_a_queue_appended_takes_sessions_and_moves_no_other(scope: str, session: str, queues: int) -> None:
    assert queue_index(scope, session, queues + 1) in (queue_index(scope, session, queues), queues)


def test_sessions_spread_over_the_queues_and_one_queue_is_all() -> None:
    spread = Counter(queue_index("acme/main", f"s{n}", 3) for n in range(3000))
    assert set(spread) == {0, 1, 2} and min(spread.values()) > 800, spread
    assert {queue_index("acme/main", f"s{n}", 1) for n in range(50)} == {0}
    # the tenant is part of it: one session id of two tenants may go to two queues
    assert len({queue_index(f"t{n}/main", "same", 4) for n in range(40)}) > 1


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"queue_redis_urls": ["redis://a:6379/0", "redis://a:6379/0"]}, "listed twice"),
        ({"queue_redis_urls": ["http://a"]}, "plain Redis"),
        ({"queue_redis_urls": ["fakeredis://q"]}, "plain Redis"),
        ({"queue_redis_urls": ["redis://a:1/0"], "queue_redis_url": "redis://b:1/0"}, "not both"),
        ({"queue_redis_urls": ["redis://a:1/0"], "redis_url": "fakeredis://x"}, "embedded"),
    ],
)
def test_a_wrong_list_of_queue_redis_says_what_to_change(values: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        Settings(**{"redis_url": "redis://store:6379/0", **values})


def test_the_queue_urls_of_each_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(redis_url="redis://s:1/0").queue_urls == ("redis://s:1/0",)
    assert Settings(redis_url="redis://s:1/0", queue_redis_url="redis://q:1/0").queue_urls == ("redis://q:1/0",)
    monkeypatch.setenv("OVSTREAM_QUEUE_REDIS_URLS", "redis://q0:1/0, redis://q1:1/0")
    listed = Settings(redis_url="redis://s:1/0")
    assert listed.queue_urls == ("redis://q0:1/0", "redis://q1:1/0") and listed.rq_redis_url == "redis://q0:1/0"
    # a cluster's queue may be a list too
    assert Settings(redis_url="redis://c:1", redis_cluster=True).queue_urls == ("redis://q0:1/0", "redis://q1:1/0")


@pytest.mark.parametrize(
    ("asked", "served"),
    [(None, (0, 1, 2)), ([], (0, 1, 2)), ([2], (2,)), ([1, 0, 1], (1, 0))],
)
def test_a_worker_serves_the_queues_it_is_given_else_every_one(
    asked: list[int] | None, served: tuple[int, ...]
) -> None:
    settings = Settings(redis_url="redis://s:1/0", queue_redis_urls=[f"redis://q{i}:1/0" for i in range(3)])
    assert served_queues(settings, asked) == served


def test_a_worker_given_a_queue_there_is_not_says_so() -> None:
    said = served_queues(Settings(redis_url="redis://s:1/0"), [1])
    assert isinstance(said, str) and "--queue 1" in said and "1 queue Redis" in said
