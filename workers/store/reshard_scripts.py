"""The scripts of the turn streams' generations (core.shard_map, workers.store.deployment):
publishing a turn to its session's current stream, closing a tag, retiring and deleting a
drained stream, adopting a stray entry. (Re-exported by workers.store.scripts, where every
script is found.)
"""

from __future__ import annotations

from workers.store.lua import STREAM_IDS, Lua

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
    STREAM_IDS
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
    STREAM_IDS
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
    STREAM_IDS
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
