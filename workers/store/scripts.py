"""Every Lua script ovstream runs, in one module, each registered once.

A ``Lua`` wraps redis-py's ``Script`` / ``AsyncScript``: a call on a client
goes out as EVALSHA, and the script is loaded (SCRIPT LOAD) only when a server
does not know it yet, so its text crosses the wire once per server, not per
call. Queued on a pipeline it goes as EVAL with its text: redis-py would
otherwise ask SCRIPT EXISTS before every execute, one round trip more than
the text costs.

Each script touches only keys of one shard's hash tag (or one lease), so all
of them run unchanged on Redis Cluster (where a pipeline's scripts go as EVAL, to the node of
their first key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.asyncio as aioredis
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
        self, client: redis.Redis | redis.client.Pipeline, keys: Sequence[KeyT], args: Sequence[EncodableT]
    ) -> Any:
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


# --- leases (capture's shard leases, the commits' tenant lock): a hash {id: owner, data} with a TTL ---

LEASE_ACQUIRE = Lua("""
local cur = redis.call('HGET', KEYS[1], 'id')
if cur and cur ~= ARGV[1] then return {0, redis.call('HGET', KEYS[1], 'data') or ''} end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'data', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] then return {1, tostring(redis.call('INCR', KEYS[2]))} end
return {1, ''}
""")
"""KEYS[1] lease, KEYS[2] (optional) its epoch counter. ARGV: owner, ms, data. Free or already
ours: take (renew) it, {1, ''}, or {1, the new epoch} with an epoch counter; held by another:
{0, its data}."""

LEASE_RENEW = Lua("""
if redis.call('HGET', KEYS[1], 'id') == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
""")
"""KEYS[1] lease. ARGV: owner, ms. 1 when renewed, 0 when it is not ours any more."""

LEASE_RELEASE = Lua("""
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
if KEYS[2] then redis.call('INCR', KEYS[2]) end
return redis.call('DEL', KEYS[1])
""")
"""KEYS[1] lease, KEYS[2] (optional) its epoch counter. ARGV: owner. Deletes the lease only when
``owner`` holds it, moving its epoch on: a lease given back is never taken back (``_HOLDS``)."""

# --- the deployment record ---------------------------------------------------------------------

DEPLOYMENT_RECORD = Lua("""
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], 'schema', ARGV[2]) end
redis.call('HSETNX', KEYS[1], 'shards', ARGV[1])
return redis.call('HMGET', KEYS[1], 'shards', 'schema', 'streams')
""")
"""KEYS[1] the deployment record. ARGV: this process's shards, its release's layout. A new
deployment records both; an existing one keeps what it has (one from before layouts were
recorded says none: workers.store.schema). Returns the recorded shards, layout and the current
generation's stream count (none before a reshard)."""

# --- commits ----------------------------------------------------------------------------------

CLAIM_LOST_JOB = Lua("""
if (redis.call('HGET', KEYS[1], 'job') or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'job', ARGV[2])
return 1
""")
"""KEYS[1] a session's in-flight commit slot. ARGV: the job seen lost ('' none), the job that
replaces it. 1 when the slot still named the lost job (this caller resumes the commit); 0 when
another process resumed it first (the sweep and a capture process may find it lost together)."""

# --- capture ----------------------------------------------------------------------------------

_HOLDS = """
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

CAPTURE_LEASE_RENEW = Lua(
    _HOLDS
    + """
if holds(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then return redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 0
"""
)
"""KEYS[1] a shard's lease, KEYS[2] its epoch counter. ARGV: consumer, its epoch, ms. 1 when
renewed (or taken back, untouched since), 0 when another consumer took it."""

FENCED_READ = Lua(
    _HOLDS
    + """
if not holds(KEYS[2], KEYS[3], ARGV[1], ARGV[4], ARGV[5]) then return -1 end
local function read(after)  -- Redis: {{stream, entries}}; the embedded fakeredis: {stream, entries}
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[1], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], after)
  if r and r[1] then
    if type(r[1]) == 'table' then return r[1][2] end
    return r[2]
  end
  return nil
end
-- What a read whose reply never came delivered (a client that retried it blindly): entries
-- pending for this consumer after the last one it saw, handed over again before anything new.
-- An entry deleted from the stream meanwhile (no fields) is left to the consumer's drain.
local own = read(ARGV[6])
if own then
  local kept = {}
  for _, e in ipairs(own) do if e[2] then kept[#kept + 1] = e end end
  if kept[1] then return {1, kept} end
end
local entries = read('>')
if entries and entries[1] then return {1, entries} end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if last[1] then return {0, last[1][1]} end
return {0, '0-0'}
"""
)
"""KEYS[1] stream, KEYS[2] the shard's lease, KEYS[3] its epoch counter. ARGV: consumer, group,
count, epoch, lease ms (``_HOLDS``), the id of the last entry the consumer saw. -1: the lease is
not ours. {1, entries}: entries pending for the consumer after that id (a read run again by a
client that lost its reply: the same entries), else new entries.
{0, last id}: nothing new; the stream's last id, to wait on with XREAD for anything newer."""

FENCED_CLAIM = Lua(
    _HOLDS
    + """
if not holds(KEYS[2], KEYS[3], ARGV[1], ARGV[3], ARGV[4]) then return -1 end
local out = {}
for i = 5, #ARGV, 500 do
  local r = redis.call('XCLAIM', KEYS[1], ARGV[2], ARGV[1], 0, unpack(ARGV, i, math.min(i + 499, #ARGV)))
  for _, e in ipairs(r) do out[#out + 1] = e end
end
return out
"""
)
"""KEYS[1] stream, KEYS[2] the shard's lease, KEYS[3] its epoch counter. ARGV: consumer, group,
epoch, lease ms (``_HOLDS``), entry ids. -1: the lease is not ours. Otherwise the entries, now
pending for ``consumer`` (an id missing from the answer was deleted from the stream). Whoever holds the lease
owns every pending entry of the shard, so no idle time is waited for: a takeover starts as
soon as the lease is won."""

FENCED_APPLY = Lua(
    _HOLDS
    + """
if not holds(KEYS[1], KEYS[2], ARGV[1], ARGV[4], ARGV[5]) then return -1 end
local plan = cjson.decode(ARGV[3])
for i, w in ipairs(plan.hashes) do
  if #w.set > 0 then redis.call('HSET', KEYS[i + 3], unpack(w.set)) end
  if #w.del > 0 then redis.call('HDEL', KEYS[i + 3], unpack(w.del)) end
  if w.px > 0 and #w.set > 0 then redis.call('PEXPIRE', KEYS[i + 3], w.px) end
  if w.px < 0 then redis.call('PERSIST', KEYS[i + 3]) end
end
for i = 1, #plan.ack, 500 do
  redis.call('XACK', KEYS[3], ARGV[2], unpack(plan.ack, i, math.min(i + 499, #plan.ack)))
end
return 1
"""
)
"""KEYS[1] the shard's lease, KEYS[2] its epoch counter, KEYS[3] its stream, KEYS[4..] hashes of
its sessions. ARGV: consumer, group, JSON ``{"hashes": [{"set": [field, value, ...], "del":
[field, ...], "px": ms}, ...], "ack": [entry id, ...]}`` (``hashes[i]`` for ``KEYS[i + 3]``; a
hash given fields to set lives ``px`` ms from now, when ``px`` > 0; lives on, when < 0), epoch, lease ms
(``_HOLDS``). 1 when every write was made;
-1, writing nothing, when the lease is not ours: a consumer stalled past its lease (a GC
pause, SIGSTOP) cannot record an intent or ack after another took the shard over."""

# --- stream ids (Lua helpers of the scripts below) ------------------------------------------

_STREAM_IDS = """
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


# --- snapshots (workers.store.snapshots) --------------------------------------------------------

SNAPSHOT_WRITE_IF_NEWER = Lua(
    _STREAM_IDS
    + """
local cur = redis.call('HMGET', KEYS[1], 'id', 'fetched_ms', 'data', 'behind')
if cur[1] and cur[3] then
  local same = cur[1] == ARGV[1]
  if older(ARGV[1], cur[1]) or (same and tonumber(ARGV[2]) < tonumber(cur[2] or '0')) then
    return {0, cur[3]}
  end
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'fetched_ms', ARGV[2], 'data', ARGV[3])
if cur[4] and not older(ARGV[1], cur[4]) then redis.call('HDEL', KEYS[1], 'behind') end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1}
"""
)
"""KEYS[1] snapshot hash. ARGV: stream id, fetched_ms, data, ttl_ms. {1} when written,
{0, stored data} when the stored one is newer. A written snapshot at or past the hash's
``behind`` mark (``SNAPSHOT_BEHIND``) clears it."""

SNAPSHOT_BEHIND = "behind"
"""Field of a snapshot hash: the stream id of the newest entry capture acknowledged after
writing its messages to OV (set in the same fenced script as the ack). A stored snapshot older
than it lacks turns that are in OV and may be gone from the stream: it is no snapshot at all
to assemble (``SNAPSHOT_VERSION``) until one at or past the mark is stored."""

SNAPSHOT_VERSION = Lua(
    _STREAM_IDS
    + """
local v = redis.call('HMGET', KEYS[1], 'id', 'fetched_ms', 'behind')
local size = redis.call('HSTRLEN', KEYS[1], 'data')
if v[3] and (not v[1] or older(v[1], v[3])) then size = 0 end
return {v[1] or false, v[2] or false, size, redis.call('GET', KEYS[2]) or false}
"""
)
"""KEYS[1] snapshot hash, KEYS[2] the session's last-turn key. {stream id, fetched_ms, data
size, newest published turn}: what assemble needs to know whether its cached copy is current,
in one command. A snapshot behind its ``behind`` mark answers size 0: missing, read OV again."""

# --- the turn streams ---------------------------------------------------------------------------

TRIM_APPLIED = Lua(
    _STREAM_IDS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local floor = nil
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last = field(group, 'name'), field(group, 'last-delivered-id')
  local pending = redis.call('XPENDING', KEYS[1], name)
  local keep
  if pending[1] > 0 then
    keep = pending[2]
  else
    local ms, seq = parse(last)
    keep = string.format('%d-%d', ms, seq + 1)
  end
  if floor == nil or older(keep, floor) then floor = keep end
end
if floor == nil then return 0 end
local scan = tonumber(ARGV[1])
if scan > 0 then
  local tail = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', scan)
  if #tail > 0 and older(tail[#tail][1], floor) then floor = tail[#tail][1] end
end
return redis.call('XTRIM', KEYS[1], 'MINID', '~', floor)
"""
)
"""KEYS[1] a turn stream. ARGV: entries at the stream's end always kept (assemble's overlay
scan reads them). Trims (approximately: whole macro nodes) the entries every consumer group
has read and acknowledged: nothing unread, nothing pending. How many went; 0 without a group.
The producers cap nothing: a backlog stays whole however long capture is away."""

# --- resharding (core.shard_map, workers.store.deployment) ----------------------------------------


PUBLISH_TURN = Lua("""
local gen = redis.call('GET', KEYS[1]) or '0'
if gen ~= ARGV[1] then return {0, gen} end
local id = redis.call('XADD', KEYS[2], '*', ARGV[2], ARGV[3])
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[5]) end
return {1, id}
""")
"""KEYS[1] the session's tag generation, KEYS[2] its stream in the publisher's generation,
KEYS[3] (optional) its last-turn key. ARGV: that generation, field, event, event id, ttl s.
{1, stream id} when published; {0, the tag's generation} when the publisher's map is out of
date (a reshard closed that stream): it reads the map again and publishes to the new stream."""

CLOSE_TAG = Lua(
    _STREAM_IDS
    + """
local target = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') >= target then return 0 end
local olds = tonumber(ARGV[2])
local top = '0-0'
for i = 2, 1 + olds do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local last = field(redis.call('XINFO', 'STREAM', KEYS[i]), 'last-generated-id')
    if last and older(top, last) then top = last end
  end
end
for i = 2 + olds, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then redis.call('XGROUP', 'CREATE', KEYS[i], ARGV[3], '0', 'MKSTREAM') end
  local last = field(redis.call('XINFO', 'STREAM', KEYS[i]), 'last-generated-id') or '0-0'
  if older(last, top) then redis.call('XSETID', KEYS[i], top) end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
)
"""KEYS[1] a tag's generation key, KEYS[2 .. 1+n] the tag's streams of the previous
generation, then its streams of the new one. ARGV: the new generation, n, the consumer group.
Creates the new streams (with the group) so their ids continue after every old stream's last
id, then moves the tag to the new generation: from here on every publish of the tag's sessions
goes to the new streams, and the old ones get nothing more. 1 when done now, 0 when it was."""

RETIRE_STREAM = Lua(
    _STREAM_IDS
    + """
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return -1 end
if tonumber(redis.call('GET', KEYS[3]) or '0') <= tonumber(ARGV[3]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local last = field(redis.call('XINFO', 'STREAM', KEYS[2]), 'last-generated-id')
  local delivered = nil
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    if field(group, 'name') == ARGV[2] then
      if tonumber(field(group, 'pending')) > 0 then return 0 end
      delivered = field(group, 'last-delivered-id')
    end
  end
  if redis.call('XLEN', KEYS[2]) > 0 and (delivered == nil or older(delivered, last)) then return 0 end
end
redis.call('SADD', KEYS[4], ARGV[4])
return 1
"""
)
"""KEYS[1] the stream's capture lease, KEYS[2] the stream, KEYS[3] its tag's generation key,
KEYS[4] the tag's retired set of the stream's generation. ARGV: consumer, group, the stream's
generation, its number. -1: the lease is not ours. 0: not yet (the tag still publishes here,
or an entry is unread or pending). 1: retired (its number is in the set): every entry it will
ever hold is applied, so the next generation's streams of the tag may be read."""

FINISH_DRAIN = Lua("""
if redis.call('HGET', KEYS[1], 'generation') == ARGV[1] and redis.call('HGET', KEYS[1], 'previous') == ARGV[2] then
  return redis.call('HDEL', KEYS[1], 'previous')
end
return 0
""")
"""KEYS[1] the deployment hash. ARGV: its generation, its previous generation ("g.shards").
Forgets the previous generation when the map is still the one its caller saw retired: 1
when forgotten now."""

DELETE_DRAINED = Lua(
    _STREAM_IDS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
local low = '-'
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  if field(group, 'name') == ARGV[1] then
    if tonumber(field(group, 'pending')) > 0 then return 0 end
    low = '(' .. field(group, 'last-delivered-id')
  end
end
if #redis.call('XRANGE', KEYS[1], low, '+', 'COUNT', 1) > 0 then return 0 end
return redis.call('DEL', KEYS[1])
"""
)
"""KEYS[1] a retired stream. ARGV: the consumer group. Deletes it unless it holds an entry the
group never delivered (a stray, workers.store.strays) or one not acknowledged: 1 when it is
gone, 0 when kept."""

ADOPT_STRAY = Lua("""
if (redis.call('GET', KEYS[3]) or '0') ~= ARGV[4] then return -1 end
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', ARGV[2], ARGV[3])
if KEYS[4] then redis.call('SET', KEYS[4], ARGV[5], 'EX', ARGV[6]) end
return 1
""")
"""KEYS[1] a retired stream, KEYS[2] the entry's stream in the current map, KEYS[3] the tag's
generation key, KEYS[4] (optional) the session's last-turn key. ARGV: the entry's id, field,
payload, the current generation, event id, ttl s. Moves the entry: 1 moved now, 0 when another
caller did, -1 when the map moved on meanwhile (the caller reads it again)."""

# --- the commit queue (workers.commits.scheduler) ---------------------------------------------

CLAIM_DUE_JOBS = Lua("""
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local claimed = {}
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[1], id) == 1 then claimed[#claimed + 1] = id end
end
return claimed
""")
"""KEYS[1] an RQ ScheduledJobRegistry. ARGV: now (unix seconds), most. The due job ids, each
removed from the registry by exactly one caller, however many workers ask at once."""

DROP_IF_SCORE = Lua("""
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
""")
"""KEYS[1] a sorted set. ARGV: member, score. Removes the member only while it has that score
(the score a claim gave it): one re-added since then stays."""

CLAIM_STALE = Lua("""
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
return ids
""")
"""KEYS[1] a sorted set of things to look at. ARGV: due (score), next score, most. The due
members, each moved to the next score: handed to exactly one of the workers asking at once."""
