"""The scripts of capture's shard consumers (workers.capture): the shard lease's renewal and
the fenced read, claim and apply (nothing is read or written by a consumer that lost its
lease), and the trim of what every group applied. Each touches one shard's hash tag only.
(Re-exported by workers.store.scripts, where every script is found.)
"""

from __future__ import annotations

from workers.store.lua import HOLDS, STREAM_IDS, Lua

# --- capture ----------------------------------------------------------------------------------

CAPTURE_LEASE_RENEW = Lua(
    HOLDS
    + """
if holds(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]) then return redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 0
"""
)
"""KEYS[1] a shard's lease, KEYS[2] its epoch counter. ARGV: consumer, its epoch, ms. 1 when
renewed (or taken back, untouched since), 0 when another consumer took it."""

FENCED_READ = Lua(
    HOLDS
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
count, epoch, lease ms (``HOLDS``), the id of the last entry the consumer saw. -1: the lease is
not ours. {1, entries}: entries pending for the consumer after that id (a read run again by a
client that lost its reply: the same entries), else new entries.
{0, last id}: nothing new; the stream's last id, to wait on with XREAD for anything newer."""

FENCED_CLAIM = Lua(
    HOLDS
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
epoch, lease ms (``HOLDS``), entry ids. -1: the lease is not ours. Otherwise the entries, now
pending for ``consumer`` (an id missing from the answer was deleted from the stream). Whoever holds the lease
owns every pending entry of the shard, so no idle time is waited for: a takeover starts as
soon as the lease is won."""

FENCED_APPLY = Lua(
    HOLDS
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
(``HOLDS``). 1 when every write was made;
-1, writing nothing, when the lease is not ours: a consumer stalled past its lease (a GC
pause, SIGSTOP) cannot record an intent or ack after another took the shard over."""

# --- the turn streams ---------------------------------------------------------------------------

TRIM_APPLIED = Lua(
    STREAM_IDS
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
