"""Which turn stream a session's events go to, across live reshards (pure rules).

A deployment keeps its sessions' records (applied offsets, snapshots, commits,
recall) under one of ``tags`` Redis Cluster hash tags, ``{s<sha mod tags>}``,
for life: ``tags`` is the ``shards`` the deployment was created with. What a
reshard changes is the *streams*: generation ``g`` has ``shards`` streams, a
session's stream being ``sha mod shards``. ``shards`` must be a multiple of
``tags``: then every stream of a generation holds sessions of one tag only, and
the stream, its lease and its sessions' records share a slot, so a round's
fenced apply stays one script on a cluster, and no record ever moves.

Order across a reshard: once a tag is closed (its generation key bumped, see
workers.store.deployment), publishers put that tag's sessions on the new
generation's streams; a new stream is read only after every stream of the
previous generation with the same tag is *retired* (closed, read to its end,
nothing pending). A session's entries therefore apply old stream first, then
new, and the new streams' ids continue after the old ones' (XSETID), so stream
ids stay comparable for the per-session applied offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.session import shard_of


@dataclass(frozen=True, slots=True, order=True)
class StreamShard:
    """One turn stream: shard ``number`` of ``count`` in ``generation`` (records under ``tags`` tags)."""

    generation: int
    number: int
    count: int
    tags: int

    @property
    def tag(self) -> int:
        """The hash tag (``{s<tag>}``) of this stream, its lease and its sessions' records."""
        return self.number % self.tags

    def home_of(self, ov_session_id: str) -> StreamShard:
        """The stream of this one's generation where ``ov_session_id``'s events go."""
        return StreamShard(self.generation, shard_of(ov_session_id, self.count), self.count, self.tags)

    def holds(self, ov_session_id: str) -> bool:
        return self.home_of(ov_session_id).number == self.number

    def __str__(self) -> str:
        return str(self.number) if self.generation == 0 else f"g{self.generation}.{self.number}"


@dataclass(frozen=True, slots=True)
class ShardMap:
    """The streams of a deployment now: the current generation, and the previous one while it drains."""

    tags: int
    generation: int = 0
    shards: int = 0
    """Streams of the current generation (0: ``tags``, a deployment never resharded)."""
    previous: tuple[int, int] | None = None
    """(generation, shards) of the generation still being drained, if any."""

    def __post_init__(self) -> None:
        if self.shards == 0:
            object.__setattr__(self, "shards", self.tags)

    def stream_of(self, ov_session_id: str) -> StreamShard:
        """The current stream of a session."""
        return self._shard(self.generation, shard_of(ov_session_id, self.shards), self.shards)

    def tag_of(self, ov_session_id: str) -> int:
        return shard_of(ov_session_id, self.tags)

    def current(self) -> list[StreamShard]:
        return [self._shard(self.generation, n, self.shards) for n in range(self.shards)]

    def draining(self) -> list[StreamShard]:
        """The previous generation's streams (all of them; which are retired is Redis's to say)."""
        if self.previous is None:
            return []
        generation, count = self.previous
        return [self._shard(generation, n, count) for n in range(count)]

    def streams_of(self, ov_session_id: str) -> list[StreamShard]:
        """Where a session's unapplied events can be, oldest first: its previous stream
        (while that generation drains), then its current one."""
        out = [s for s in self.draining() if s.holds(ov_session_id)]
        return [*out, self.stream_of(ov_session_id)]

    def predecessors(self, shard: StreamShard) -> list[StreamShard]:
        """The previous generation's streams that must retire before ``shard`` is read:
        those of its tag (a session never changes tag)."""
        if shard.generation != self.generation:
            return []
        return [s for s in self.draining() if s.tag == shard.tag]

    def first_left_behind(self) -> list[StreamShard]:
        """Generation 0's streams once the map has left it for good (neither current nor
        draining): nothing reads them then, yet a publisher older than resharding still
        appends there (workers.store.strays moves what it appends)."""
        if self.generation == 0 or (self.previous is not None and self.previous[0] == 0):
            return []
        return [self._shard(0, n, self.tags) for n in range(self.tags)]

    def _shard(self, generation: int, number: int, count: int) -> StreamShard:
        return StreamShard(generation, number, count, self.tags)

    def __str__(self) -> str:
        out = f"generation {self.generation}: {self.shards} shards"
        if self.previous is not None:
            out += f", generation {self.previous[0]} ({self.previous[1]} shards) draining"
        return out


class ReshardRefused(ValueError):
    """A reshard that cannot start: the message says why and what would work."""


def resharded(current: ShardMap, shards: int) -> ShardMap:
    """The map after resharding ``current`` to ``shards`` streams, or ``ReshardRefused``."""
    if current.previous is not None:
        generation, count = current.previous
        raise ReshardRefused(
            f"generation {generation} ({count} shards) is still draining into generation "
            f"{current.generation}; reshard again once it is retired (`ovstream status`)"
        )
    if shards < 1:
        raise ReshardRefused(
            f"shards must be a positive count of turn streams (this deployment runs {current.shards}); got {shards}"
        )
    if shards < current.tags or shards % current.tags:
        raise ReshardRefused(
            f"shards must be a multiple of {current.tags} (the count this deployment was created with, "
            f"which its records are kept under), e.g. {current.tags}, {current.tags * 2} or {current.tags * 4}; "
            f"got {shards}"
        )
    if shards == current.shards:
        raise ReshardRefused(f"the deployment already runs {shards} shards")
    return ShardMap(current.tags, current.generation + 1, shards, (current.generation, current.shards))
