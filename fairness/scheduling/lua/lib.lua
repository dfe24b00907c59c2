-- lib.lua: helpers shared by every admission script. Not run on its own: admission.py prepends it
-- to each entry script, so the KEYS/ARGV contract below holds for all of them.
--
-- KEYS[1]  namespace, e.g. "gp:{adm}:". Every key touched is KEYS[1] .. suffix, so all of them
--          share the {adm} hash tag (one Redis Cluster slot); KEYS[1] routes the call there.
-- ARGV[1]  now (seconds, float, from the caller's injectable clock)
-- ARGV[2]  lease TTL (s): a lease not renewed for this long is dropped
-- ARGV[3]  ticket TTL (s): a waiting ticket not heartbeated for this long is dropped
--          (expiries are stored absolute, so processes with different TTLs coexist)
-- ARGV[4]  reserve: engine slots a borrowed grant must leave free
-- ARGV[5..] entry-script arguments
--
-- Layout (names are suffixes of KEYS[1]; k = key id, p = pool/tier, g = capacity group, h = handle):
--   cap, kcap, pcap              hashes: group capacity, key cap, pool cap (absent = no pool cap)
--   kin, pin, gin, pbin          hashes: leases in flight per key, pool, group; borrowed per pool
--   kq, pq, gq, pgq              hashes: tickets queued per key, pool, group, "p|g"
--   l:h  lx                      lease hash (key pool group b enq at); zset h -> expiry
--   t:h  tx                      ticket hash (m key pool group enq borrow chan deadline);
--                                zset h -> expiry (last heartbeat + ticket TTL)
--   seq                          arrival counter; a ticket's member is "%016d:h" so equal scores
--                                sort by arrival
--   q:k|p|g                      a stream: one key's tickets for one group, member -> score
--   fl                           hash "k|p|g" -> floor: the stream's head scores at least this
--   l2:p|g                       heads of the streams of pool p whose key is under its cap
--   l3:g                         the best l2 head of every pool under its cap: the eligible set
--   b:g                          heads of all streams whose head ticket may borrow
--   idx                          which member each stream/pool currently has in l2/l3/b
--   ks:k  pg:p                   sets: "p|g" streams a key has queued; groups a pool has queued
--   pe:p                         zset h -> enqueued_at, for the longest wait
-- A grant only ever inspects the head of l3:g (or b:g), so its cost does not grow with the queue.

local NS = KEYS[1]
local NOW = tonumber(ARGV[1])
local TTL = tonumber(ARGV[2])
local TICKET_TTL = tonumber(ARGV[3])
local RESERVE = tonumber(ARGV[4])
local IDX = NS .. 'idx'
local DIRTY = {}    -- groups that may now be able to grant: pump them before returning
local GRANTED = {}  -- handle -> {borrowed, queued_seconds} granted during this call
local QUIET = nil   -- the caller's own handle: it learns of its grant from the reply, not pub/sub

local function num(x) return tonumber(x) or 0 end

local function hincr(hash, field, by)
  local v = redis.call('HINCRBY', NS .. hash, field, by)
  if v <= 0 then redis.call('HDEL', NS .. hash, field) end  -- keep the counters sparse
  return v
end

local function key_open(key)
  return num(redis.call('HGET', NS .. 'kin', key)) < num(redis.call('HGET', NS .. 'kcap', key))
end

local function pool_open(pool)
  local cap = redis.call('HGET', NS .. 'pcap', pool)
  return (not cap) or num(redis.call('HGET', NS .. 'pin', pool)) < num(cap)
end

-- Put `member` (or nothing, when false) in zset `zkey` as the entry of `slot`. `rescored`: the
-- same member may now carry a different score.
local function set_entry(zkey, slot, member, score, group, rescored)
  local old = redis.call('HGET', IDX, slot)
  if old == member then
    if member and rescored then
      redis.call('ZADD', zkey, score, member)
      DIRTY[group] = true
    end
    return
  end
  if old then redis.call('ZREM', zkey, old) end
  if member then
    redis.call('ZADD', zkey, score, member)
    redis.call('HSET', IDX, slot, member)
    DIRTY[group] = true
  else
    redis.call('HDEL', IDX, slot)
  end
end

local function head(zkey)
  local r = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  return r[1] or false, r[2]
end

local function refresh_pool_group(pool, group, rescored)
  local member, score = false, nil
  if pool_open(pool) then member, score = head(NS .. 'l2:' .. pool .. '|' .. group) end
  set_entry(NS .. 'l3:' .. group, 'P|' .. pool .. '|' .. group, member, score, group, rescored)
end

local function refresh_stream(key, pool, group, rescored)
  local s = key .. '|' .. pool .. '|' .. group
  local member, score = head(NS .. 'q:' .. s)
  if member then
    local floor = redis.call('HGET', NS .. 'fl', s)
    if floor and tonumber(floor) > tonumber(score) then score = floor end
  end
  set_entry(NS .. 'l2:' .. pool .. '|' .. group, 'K|' .. s, key_open(key) and member, score, group,
    rescored)
  local borrower = false
  if member and redis.call('HGET', NS .. 't:' .. string.sub(member, 18), 'borrow') == '1' then
    borrower = member
  end
  set_entry(NS .. 'b:' .. group, 'B|' .. s, borrower, score, group, rescored)
  refresh_pool_group(pool, group, rescored)
end

-- A key's in-flight count or cap changed: each of its streams may enter or leave l2.
local function refresh_key(key)
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. 'ks:' .. key)) do
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group)
  end
end

-- A key at its cap gave a lease back. Its waiting tickets start ageing only now: time spent
-- queued behind one's own cap is not time denied by others, so it buys no rank over them (else
-- a key that queues many requests would jump everyone as soon as its cap opens). One floor per
-- stream: its tickets queue in arrival order, so only the head's score is ever read. Refreshes
-- every stream of the key (ks: lists only streams with tickets), as refresh_key would.
local function key_cap_opened(key)
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. 'ks:' .. key)) do
    local s = key .. '|' .. pg
    local member = head(NS .. 'q:' .. s)
    local head_start = num(redis.call('HGET', NS .. 't:' .. string.sub(member, 18), 'hs'))
    redis.call('HSET', NS .. 'fl', s, string.format('%.6f', NOW - head_start))
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group, true)
  end
end

-- A pool's in-flight count or cap changed: each of its groups may enter or leave l3.
local function refresh_pool(pool)
  for _, group in ipairs(redis.call('SMEMBERS', NS .. 'pg:' .. pool)) do
    refresh_pool_group(pool, group)
  end
end

local function enqueue(handle, key, pool, group, enq, head_start, borrow, chan, deadline)
  local member = string.format('%016d:%s', redis.call('INCR', NS .. 'seq'), handle)
  local pg = pool .. '|' .. group
  redis.call('HSET', NS .. 't:' .. handle, 'm', member, 'key', key, 'pool', pool, 'group', group,
    'enq', enq, 'hs', head_start, 'borrow', borrow, 'chan', chan, 'deadline', deadline)
  redis.call('ZADD', NS .. 'q:' .. key .. '|' .. pg, enq - head_start, member)
  redis.call('ZADD', NS .. 'tx', NOW + TICKET_TTL, handle)
  redis.call('ZADD', NS .. 'pe:' .. pool, enq, handle)
  hincr('kq', key, 1); hincr('pq', pool, 1); hincr('gq', group, 1); hincr('pgq', pg, 1)
  redis.call('SADD', NS .. 'ks:' .. key, pg)
  redis.call('SADD', NS .. 'pg:' .. pool, group)
  refresh_stream(key, pool, group)
  return member
end

-- Remove a waiting ticket; returns {member, key, pool, group, enq, chan} or nil.
local function dequeue(handle)
  redis.call('ZREM', NS .. 'tx', handle)
  local t = redis.call('HMGET', NS .. 't:' .. handle, 'm', 'key', 'pool', 'group', 'enq', 'chan')
  if not t[1] then return nil end
  local key, pool, group = t[2], t[3], t[4]
  local pg = pool .. '|' .. group
  local q = NS .. 'q:' .. key .. '|' .. pg
  redis.call('DEL', NS .. 't:' .. handle)
  redis.call('ZREM', q, t[1])
  redis.call('ZREM', NS .. 'pe:' .. pool, handle)
  hincr('kq', key, -1); hincr('pq', pool, -1); hincr('gq', group, -1)
  if hincr('pgq', pg, -1) <= 0 then redis.call('SREM', NS .. 'pg:' .. pool, group) end
  if redis.call('ZCARD', q) == 0 then
    redis.call('SREM', NS .. 'ks:' .. key, pg)
    redis.call('HDEL', NS .. 'fl', key .. '|' .. pg)
  end
  refresh_stream(key, pool, group)
  return t
end

local function take(handle, key, pool, group, borrowed, enq, expiry)
  redis.call('HSET', NS .. 'l:' .. handle, 'key', key, 'pool', pool, 'group', group,
    'b', borrowed, 'enq', enq, 'at', NOW)
  redis.call('ZADD', NS .. 'lx', expiry, handle)
  hincr('kin', key, 1); hincr('pin', pool, 1); hincr('gin', group, 1)
  if borrowed == 1 then hincr('pbin', pool, 1) end
  refresh_key(key); refresh_pool(pool)
  GRANTED[handle] = {borrowed, NOW - enq}
end

local function free(handle)
  local l = redis.call('HMGET', NS .. 'l:' .. handle, 'key', 'pool', 'group', 'b')
  redis.call('ZREM', NS .. 'lx', handle)
  if not l[1] then return false end
  redis.call('DEL', NS .. 'l:' .. handle)
  local was_capped = not key_open(l[1])
  hincr('kin', l[1], -1); hincr('pin', l[2], -1); hincr('gin', l[3], -1)
  if l[4] == '1' then hincr('pbin', l[2], -1) end
  DIRTY[l[3]] = true
  if was_capped then key_cap_opened(l[1]) else refresh_key(l[1]) end
  refresh_pool(l[2])
  return true
end

local function grant(member, group)
  local handle = string.sub(member, 18)
  -- The lease expires when the ticket would have: one TTL after its process last showed life,
  -- so a grant to a process that has just died is still gone within one TTL of its death.
  local expiry = tonumber(redis.call('ZSCORE', NS .. 'tx', handle)) or (NOW + TTL)
  local t = dequeue(handle)
  if not t then  -- cannot happen while the indexes are consistent; never loop on it
    redis.call('ZREM', NS .. 'l3:' .. group, member)
    redis.call('ZREM', NS .. 'b:' .. group, member)
    return
  end
  local key, pool, group, enq = t[2], t[3], t[4], tonumber(t[5])
  -- Borrowed: granted beyond the key's or the pool's cap, out of otherwise idle slots.
  local borrowed = ((not key_open(key)) or (not pool_open(pool))) and 1 or 0
  take(handle, key, pool, group, borrowed, enq, expiry)
  if handle ~= QUIET then
    redis.call('PUBLISH', t[6], handle .. '|' .. string.format('%.6f', NOW - enq) .. '|' .. borrowed)
  end
end

-- Grant as many tickets of `group` as its free slots allow: eligible tickets first, in score
-- order; borrowers only when no eligible ticket waits and RESERVE slots would stay free.
local function pump(group)
  local cap = num(redis.call('HGET', NS .. 'cap', group))
  for _ = 1, 1000 do
    local busy = num(redis.call('HGET', NS .. 'gin', group))
    if busy >= cap then return end
    local member = head(NS .. 'l3:' .. group)
    if not member then
      if busy + 1 > cap - RESERVE then return end
      member = head(NS .. 'b:' .. group)
      if not member then return end
    end
    grant(member, group)
  end
end

local function pump_dirty()
  for _ = 1, 1000 do
    local group = next(DIRTY)
    if not group then return end
    DIRTY[group] = nil
    pump(group)
  end
end

-- Leases and tickets whose holder stopped renewing (a dead process) are dropped lazily, at the
-- start of every call; waiting tickets call in every few seconds, so someone always does this.
local function reap()
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', NS .. 'lx', '-inf', NOW, 'LIMIT', 0, 100)) do
    free(h)
  end
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', NS .. 'tx', '-inf', NOW, 'LIMIT', 0, 100)) do
    dequeue(h)
  end
end
