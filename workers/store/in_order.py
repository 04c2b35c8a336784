"""``InOrder``: commands Redis must run in the order given, in as few round trips as keep it.

On one Redis (a plain server, Sentinel's master, fakeredis) a pipeline goes over one
connection and Redis runs it in order: one round trip for all of them. A cluster client's
pipeline sends each node its share on its own, so a command could run before one given ahead
of it on another node (an index written after the record it indexes, say); there each runs as
it is given, one round trip each, as if there were no pipeline. Commands on one hash-tagged
slot go to one node in order either way: a caller needing only that uses a plain pipeline.

A round trip costs Redis more than most commands do (bench/RESULTS.md: a commit's Redis CPU
was two thirds reading and answering requests), so the commit records send theirs this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis as redis_lib


class InOrder:
    """``add`` each command as ``lambda client: client.zadd(...)`` (a script: ``lambda client:
    SCRIPT(client, keys, args)``), then ``run`` for their answers, in order."""

    def __init__(self, redis: redis_lib.Redis) -> None:
        self._one_redis = isinstance(redis, redis_lib.Redis)  # a cluster client is no redis.Redis
        self._client: Any = redis.pipeline(transaction=False) if self._one_redis else redis
        self._answers: list[Any] = []

    def add(self, command: Callable[[Any], Any]) -> InOrder:
        answer = command(self._client)
        if not self._one_redis:  # ran as given
            self._answers.append(answer)
        return self

    def run(self) -> list[Any]:
        """The answers, in the order the commands were added; an error raises."""
        if self._one_redis:
            with self._client as pipe:
                return list(pipe.execute())
        answers, self._answers = self._answers, []
        return answers
