"""Every Lua script ovstream runs, found here, each registered once (``workers.store.lua``):
the leases', the deployment record's, the commits', the snapshots' and the commit queue's are
defined here; capture's (workers.store.capture_scripts) and the stream generations'
(workers.store.reshard_scripts) are re-exported.

Each script touches only keys of one shard's hash tag (or one lease), so all
of them run unchanged on Redis Cluster (where a pipeline's scripts go as EVAL, to the node of
their first key).
"""

from __future__ import annotations

from workers.store.capture_scripts import (
    CAPTURE_LEASE_RENEW,
    FENCED_APPLY,
    FENCED_CLAIM,
    FENCED_READ,
    TRIM_APPLIED,
)
from workers.store.lua import HOLDS, STREAM_IDS, Lua
from workers.store.reshard_scripts import (
    ADOPT_STRAY,
    CLOSE_TAG,
    DELETE_DRAINED,
    FINISH_DRAIN,
    PUBLISH_TURN,
    RETIRE_STREAM,
)

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
local cur = redis.call('HGET', KEYS[1], 'id')
if cur ~= ARGV[1] then
  if not cur and KEYS[2] and ARGV[2] and ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[2] then
    redis.call('INCR', KEYS[2])
  end
  return 0
end
if KEYS[2] then redis.call('INCR', KEYS[2]) end
return redis.call('DEL', KEYS[1])
""")
"""KEYS[1] lease, KEYS[2] (optional) its epoch counter. ARGV: owner, (optional) the owner's epoch.
Deletes the lease only when ``owner`` holds it, moving its epoch on: a lease given back is never
taken back (``HOLDS``). One that lapsed before it was given back, nobody having taken it since
(its counter still at the owner's epoch), has its epoch moved on all the same: else a renewal
sent before the release and run after it took it back (a starved stop: the lease held on after
the worker that gave it back ended)."""

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

CREATE_COMMIT_IF_FREE = Lua("""
if redis.call('HEXISTS', KEYS[1], 'req') == 1 then return 0 end
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[6])
if ARGV[7] == '1' then redis.call('HDEL', KEYS[1], ARGV[8], ARGV[9]) end
redis.call('HSET', KEYS[1], 'req', ARGV[4], 'job', ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[6])
return 1
""")
"""KEYS: a session's in-flight commit slot, its commit counter, its commit records (one hash
tag). ARGV: the new commit's id, the counter as read ('' none), the new commit's number, its
request, its pending outcome (JSON), the counter's and records' lifetime (s), '1' to drop the
owed-commit fields, their two names. Makes the commit (the counter, the slot naming its
request and job, its pending record) only while the slot holds no commit and the counter is as
read (1); else 0, nothing written (workers.commits.request: the watched way decides)."""

SET_POLL_IF_IN_FLIGHT = Lua("""
if redis.call('HEXISTS', KEYS[1], 'req') == 0 then return 0 end
redis.call('HSET', KEYS[1], 'job', ARGV[1], ARGV[2], ARGV[3])
return 1
""")
"""KEYS[1] a session's in-flight commit slot. ARGV: what its job becomes, the field of the
next phase-2 read's state and that state. Written only while the slot holds a commit (1): a
read that raced the commit's final record creates no slot without a request (0)."""

RECORD_OUTCOME = Lua("""
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local ok, stored = pcall(cjson.decode, current)
  local s = ok and type(stored) == 'table' and stored['status'] or nil
  if s == 'completed' or s == 'failed' or s == 'timeout' or s == 'skipped' then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if not current or ARGV[4] == '1' then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('EXPIRE', KEYS[3], ARGV[3])
end
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
  local slot = redis.call('HMGET', KEYS[2], 'req', ARGV[5])
  if slot[1] and not slot[2] then
    local ok, req = pcall(cjson.decode, slot[1])
    if ok and type(req) == 'table' and req['commit_id'] == ARGV[1] then redis.call('DEL', KEYS[2]) end
  end
end
return 1
""")
"""KEYS: a session's commit records, its in-flight slot, its commit counter, its unannounced
outcomes (one hash tag). ARGV: commit id, the outcome's JSON, the records' lifetime (s), '1'
when it is final, the slot's field naming a commit owed after it. Stores the outcome unless a
final one is stored (0); a final one is also filed unannounced and ends the slot when the slot
is this commit's and owes no commit after it (workers.commits.records.CommitRecords.record)."""

# --- snapshots (workers.store.snapshots) --------------------------------------------------------

SNAPSHOT_WRITE_IF_NEWER = Lua(
    STREAM_IDS
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
    STREAM_IDS
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

DROP_EACH_IF_SCORE = Lua("""
local dropped = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[1]) then dropped = dropped + redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return dropped
""")
"""KEYS[1] a sorted set. ARGV: a score, then members. ``DROP_IF_SCORE`` for each member (those
one claim gave that score): one command for a batch's."""

CLAIM_STALE = Lua("""
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
if #ids == 0 then return ids end
local moved = {}
for i, id in ipairs(ids) do moved[2 * i - 1] = ARGV[2]; moved[2 * i] = id end
redis.call('ZADD', KEYS[1], unpack(moved))
return ids
""")
"""KEYS[1] a sorted set of things to look at. ARGV: due (score), next score, most (small: one
ZADD moves them all, its arguments on Lua's stack). The due members, each moved to the next
score: handed to exactly one of the workers asking at once."""

FORGET_IDLE_LINES = Lua("""
local gone = 0
for _, line in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])) do
  local key = ARGV[2] .. line
  if redis.call('LLEN', key) == 0 then
    redis.call('ZREM', KEYS[1], line)
    redis.call('SREM', ARGV[3], key)
    gone = gone + 1
  end
end
return gone
""")
"""KEYS[1] the commit lines (``Keys.commit_lines``). ARGV: the cutoff (unix seconds), the prefix
of a line's list key, RQ's set of queue keys. Lines last pushed onto before the cutoff whose list
is empty leave both sets; how many. On the queue's Redis, never a cluster: a line's key is made
here."""

__all__ = [
    "ADOPT_STRAY",
    "CAPTURE_LEASE_RENEW",
    "CLAIM_DUE_JOBS",
    "CLAIM_LOST_JOB",
    "CLAIM_STALE",
    "CLOSE_TAG",
    "CREATE_COMMIT_IF_FREE",
    "DELETE_DRAINED",
    "DEPLOYMENT_RECORD",
    "DROP_EACH_IF_SCORE",
    "DROP_IF_SCORE",
    "FENCED_APPLY",
    "FENCED_CLAIM",
    "FENCED_READ",
    "FINISH_DRAIN",
    "FORGET_IDLE_LINES",
    "HOLDS",
    "LEASE_ACQUIRE",
    "LEASE_RELEASE",
    "LEASE_RENEW",
    "PUBLISH_TURN",
    "RETIRE_STREAM",
    "SNAPSHOT_VERSION",
    "SNAPSHOT_WRITE_IF_NEWER",
    "STREAM_IDS",
    "TRIM_APPLIED",
    "Lua",
]
