"""``Lua``: one script, registered once, run on any client; and the Lua helpers several
scripts share (``HOLDS``, ``STREAM_IDS``). The scripts themselves: workers.store.scripts.

A ``Lua`` wraps redis-py's ``Script`` / ``AsyncScript``: a call on a client
goes out as EVALSHA, and the script is loaded (SCRIPT LOAD) only when a server
does not know it yet, so its text crosses the wire once per server, not per
call. Queued on a pipeline it goes as EVAL with its text: redis-py would
otherwise ask SCRIPT EXISTS before every execute, one round trip more than
the text costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.asyncio as aioredis
import redis.cluster
from redis.asyncio.cluster import ClusterPipeline
from redis.commands.core import AsyncScript, Script
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, KeyT


class Lua:
    """One script, callable on a sync client or pipeline (``__call__``) or an asyncio one (``run``)."""

    def __init__(self, source: str) -> None:
        self.source = source
        body = source.encode()
        # bytes need no client encoder: the scripts are bound to no client, every call names its own
        self._sync = Script(cast(Any, None), body)
        self._async = AsyncScript(cast(Any, None), body)

    def __call__(
        self,
        client: redis.Redis | redis.client.Pipeline | redis.cluster.ClusterPipeline,
        keys: Sequence[KeyT],
        args: Sequence[EncodableT],
    ) -> Any:
        if isinstance(client, redis.cluster.ClusterPipeline):
            # queued, its slot from its keys (the cluster pipeline's eval() is not implemented;
            # an EVALSHA of a script its node never loaded would fail)
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)
        if isinstance(client, redis.client.Pipeline):
            return client.eval(self.source, len(keys), *keys, *args)
        return self._sync(keys=keys, args=args, client=client)

    async def run(
        self,
        client: aioredis.Redis | aioredis.client.Pipeline,
        keys: Sequence[KeyT],
        args: Sequence[EncodableT],
    ) -> Any:
        if isinstance(client, aioredis.client.Pipeline | ClusterPipeline):
            # queued, not awaited: awaiting a cluster pipeline runs what it holds so far
            return client.eval(self.source, len(keys), *keys, *args)
        # On a client, EVALSHA straight away (the hot path of assemble): AsyncScript's
        # per-call bookkeeping costs about a tenth of a loopback round trip.
        try:
            return await client.evalsha(self._async.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await self._async(keys=keys, args=args, client=client)


# --- Lua helpers several scripts share ---------------------------------------------------------

HOLDS = """
local function holds(lease, epoch_key, me, epoch, ms)
  local cur = redis.call('HGET', lease, 'id')
  if cur then return cur == me end
  if epoch == '' or redis.call('GET', epoch_key) ~= epoch then return false end
  redis.call('HSET', lease, 'id', me, 'data', '')
  redis.call('PEXPIRE', lease, ms)
  return true
end
"""
"""Lua: whether consumer ``me`` holds a shard's lease. A lease that lapsed while nobody took it
since ``me`` took it (its epoch counter still at ``epoch``) is taken back: nothing of the shard
can have changed hands meanwhile, so a consumer frozen or starved past its lease (SIGSTOP, a
busy machine) carries on where it was instead of handing its work to itself."""

STREAM_IDS = """
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function older(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  return ams < bms or (ams == bms and aseq < bseq)
end
local function field(reply, name)
  for i = 1, #reply, 2 do if reply[i] == name then return reply[i + 1] end end
  return nil
end
"""
"""Lua helpers of the stream scripts: stream ids compared as Redis orders them, and a field
of an XINFO reply (a flat name, value, ... list)."""
