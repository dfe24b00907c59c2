-- lib/queue.lua: the streams of tickets, their heads in l2/l3/b, and taking, freeing and granting a lease.

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

refresh_stream = function(key, pool, group, rescored)
  local s = key .. '|' .. pool .. '|' .. group
  local member, score = head(NS .. 'q:' .. s)
  local borrower = false
  if member then
    local floor = redis.call('HGET', NS .. 'fl', s)
    if floor and tonumber(floor) > tonumber(score) then score = floor end
    local t = redis.call('HMGET', NS .. 't:' .. handle_of(member), 'borrow', 'a', 'fw')
    if t[1] == '1' then borrower = member end
    local delay = fair_share_delay(t[2], t[3])
    if delay > 0 then score = string.format('%.6f', tonumber(score) + delay) end
  end
  set_entry(NS .. 'l2:' .. pool .. '|' .. group, 'K|' .. s, key_open(key) and member, score, group,
    rescored)
  set_entry(NS .. 'b:' .. group, 'B|' .. s, borrower, score, group, rescored)
  refresh_pool_group(pool, group, rescored)
end

-- A key's in-flight count or cap changed: each of its streams may enter or leave l2.
local function refresh_key(key)
  if not anyone_waiting() then return end
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
  if not anyone_waiting() then return end
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. 'ks:' .. key)) do
    local s = key .. '|' .. pg
    local member = head(NS .. 'q:' .. s)
    local head_start = num(redis.call('HGET', NS .. 't:' .. handle_of(member), 'hs'))
    redis.call('HSET', NS .. 'fl', s, string.format('%.6f', NOW - head_start))
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group, true)
  end
end

-- A pool's in-flight count or cap changed: each of its groups may enter or leave l3.
local function refresh_pool(pool)
  if not anyone_waiting() then return end
  for _, group in ipairs(redis.call('SMEMBERS', NS .. 'pg:' .. pool)) do
    refresh_pool_group(pool, group)
  end
end

local function enqueue(handle, key, pool, group, enq, head_start, borrow, chan, deadline, pref, avoid,
                       assoc, weight, estimate, budgets, revocable)
  local member = string.format('%016d:%s', redis.call('INCR', NS .. 'seq'), handle)
  WAITING = redis.call('INCR', NS .. 'nq')
  local pg = pool .. '|' .. group
  redis.call('HSET', NS .. 't:' .. handle, 'm', member, 'key', key, 'pool', pool, 'group', group,
    'enq', enq, 'hs', head_start, 'borrow', borrow, 'chan', chan, 'deadline', deadline,
    'pref', pref, 'avoid', avoid, 'a', assoc, 'fw', weight, 'est', estimate, 'bres', budgets or '',
    'rv', revocable and '1' or '0')
  if assoc ~= '' then
    redis.call('SADD', NS .. 'ak:' .. assoc, key)
    redis.call('SADD', NS .. 'fa', assoc)
  end
  redis.call('ZADD', NS .. 'q:' .. key .. '|' .. pg, enq - head_start, member)
  redis.call('ZADD', NS .. 'tx', NOW + TICKET_TTL, handle)
  redis.call('ZADD', NS .. 'pe:' .. pool, enq, handle)
  hincr('kq', key, 1); hincr('pq', pool, 1); hincr('gq', group, 1); hincr('pgq', pg, 1)
  redis.call('SADD', NS .. 'ks:' .. key, pg)
  redis.call('SADD', NS .. 'pg:' .. pool, group)
  refresh_stream(key, pool, group)
  return member
end

-- Remove a waiting ticket; returns {member, key, pool, group, enq, chan, pref, avoid, assoc,
-- estimate, budgets, revocable} or nil.
local function dequeue(handle)
  redis.call('ZREM', NS .. 'tx', handle)
  local t = redis.call('HMGET', NS .. 't:' .. handle, 'm', 'key', 'pool', 'group', 'enq', 'chan',
    'pref', 'avoid', 'a', 'est', 'bres', 'rv')
  if not t[1] then return nil end
  local key, pool, group = t[2], t[3], t[4]
  local pg = pool .. '|' .. group
  local q = NS .. 'q:' .. key .. '|' .. pg
  redis.call('DEL', NS .. 't:' .. handle)
  WAITING = redis.call('DECR', NS .. 'nq')
  if WAITING <= 0 then redis.call('DEL', NS .. 'nq'); WAITING = 0 end
  redis.call('ZREM', q, t[1])
  redis.call('ZREM', NS .. 'pe:' .. pool, handle)
  hincr('kq', key, -1); hincr('pq', pool, -1); hincr('gq', group, -1)
  if hincr('pgq', pg, -1) <= 0 then redis.call('SREM', NS .. 'pg:' .. pool, group) end
  if redis.call('ZCARD', q) == 0 then
    redis.call('SREM', NS .. 'ks:' .. key, pg)
    redis.call('HDEL', NS .. 'fl', key .. '|' .. pg)
    if t[9] and t[9] ~= '' and redis.call('SCARD', NS .. 'ks:' .. key) == 0 then
      redis.call('SREM', NS .. 'ak:' .. t[9], key)
      if redis.call('SCARD', NS .. 'ak:' .. t[9]) == 0 then redis.call('SREM', NS .. 'fa', t[9]) end
    end
  end
  refresh_stream(key, pool, group)
  return t
end

local function take(handle, key, pool, group, replica, borrowed, enq, expiry, assoc, estimate, budgets,
                    revocable, chan)
  local fields = {'key', key, 'pool', pool, 'group', group, 'r', replica, 'b', borrowed, 'enq', enq, 'at', NOW}
  if revocable and borrowed == 1 then
    fields[#fields + 1] = 'rv'; fields[#fields + 1] = 1
    fields[#fields + 1] = 'chan'; fields[#fields + 1] = chan
    redis.call('ZADD', NS .. 'rv:' .. group, NOW, handle)
  end
  if budgets and budgets ~= '' then
    fields[#fields + 1] = 'bres'; fields[#fields + 1] = budgets
    fields[#fields + 1] = 'best'; fields[#fields + 1] = estimate
  end
  local charged = assoc and assoc ~= '' and num(estimate) > 0
  if charged then
    fields[#fields + 1] = 'a'; fields[#fields + 1] = assoc
    fields[#fields + 1] = 'est'; fields[#fields + 1] = estimate
  end
  redis.call('HSET', NS .. 'l:' .. handle, unpack(fields))
  if charged then charge(assoc, num(estimate)) end
  redis.call('ZADD', NS .. 'lx', expiry, handle)
  hcount('kin', key, 1); hcount('pin', pool, 1); hcount('gin', group, 1); hcount('rin', replica, 1)
  if borrowed == 1 then hcount('pbin', pool, 1) end
  LOADS[group] = nil
  refresh_key(key); refresh_pool(pool)
  GRANTED[handle] = {borrowed, NOW - enq, replica}
end

-- Give a lease back. `moving`: its request goes straight back to the queue (its replica failed
-- it), so its key's cap has not really opened and its other waiting tickets gain no rank.
local function free(handle, moving)
  local l = redis.call('HMGET', NS .. 'l:' .. handle, 'key', 'pool', 'group', 'b', 'r', 'a', 'est', 'rv',
    'asked')
  redis.call('ZREM', NS .. 'lx', handle)
  if not l[1] then return false end
  redis.call('DEL', NS .. 'l:' .. handle)
  if l[8] then redis.call('ZREM', NS .. 'rv:' .. l[3], handle) end
  if l[9] then hincr('rvp', l[3], -1) end
  -- It never ran: its estimate comes back (the grant on another replica charges it again).
  if moving and l[6] then charge(l[6], -num(l[7])) end
  -- (Whether its key was at its cap matters only to tickets waiting behind it.)
  local was_capped = anyone_waiting() and not key_open(l[1])
  hcount('kin', l[1], -1); hcount('pin', l[2], -1); hcount('gin', l[3], -1)
  if l[5] then hcount('rin', l[5], -1) end
  if l[4] == '1' then hcount('pbin', l[2], -1) end
  LOADS[l[3]] = nil
  DIRTY[l[3]] = true
  if was_capped and not moving then key_cap_opened(l[1]) else refresh_key(l[1]) end
  refresh_pool(l[2])
  return true
end

local function grant(member, group)
  local handle = handle_of(member)
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
  local replica = choose_replica(group, t[7] or '', t[8] or '')
  -- Borrowed: granted beyond the key's or the pool's cap, out of otherwise idle slots.
  local borrowed = ((not key_open(key)) or (not pool_open(pool))) and 1 or 0
  take(handle, key, pool, group, replica, borrowed, enq, expiry, t[9], t[10], t[11], t[12] == '1', t[6])
  if handle ~= QUIET then
    redis.call('PUBLISH', t[6],
      handle .. '|' .. string.format('%.6f', NOW - enq) .. '|' .. borrowed .. '|' .. replica)
  end
end

