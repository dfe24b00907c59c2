-- lib/queue.lua: the streams of tickets, their heads (stream_heads, eligible, borrower_heads), and
-- taking, freeing and granting a lease.

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
  if pool_open(pool) then member, score = head(NS .. KEY.stream_heads .. pool .. '|' .. group) end
  set_entry(NS .. KEY.eligible .. group, 'P|' .. pool .. '|' .. group, member, score, group, rescored)
end

refresh_stream = function(key, pool, group, rescored)
  local s = key .. '|' .. pool .. '|' .. group
  local member, score = head(NS .. KEY.stream .. s)
  local borrower = false
  if member then
    local floor = redis.call('HGET', NS .. KEY.stream_floor, s)
    if floor and tonumber(floor) > tonumber(score) then score = floor end
    local t = redis.call('HMGET', NS .. KEY.ticket .. handle_of(member), FIELD.borrow, FIELD.association,
      FIELD.fair_share_weight)
    if t[1] == '1' then borrower = member end
    local delay = fair_share_delay(t[2], t[3])
    if delay > 0 then score = string.format('%.6f', tonumber(score) + delay) end
  end
  set_entry(NS .. KEY.stream_heads .. pool .. '|' .. group, 'K|' .. s, key_open(key) and member, score,
    group, rescored)
  set_entry(NS .. KEY.borrower_heads .. group, 'B|' .. s, borrower, score, group, rescored)
  refresh_pool_group(pool, group, rescored)
end

-- A key's in-flight count or cap changed: each of its streams may enter or leave stream_heads.
local function refresh_key(key)
  if not anyone_waiting() then return end
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. KEY.key_streams .. key)) do
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group)
  end
end

-- A key at its cap gave a lease back. Its waiting tickets start ageing only now: time spent
-- queued behind one's own cap is not time denied by others, so it buys no rank over them (else
-- a key that queues many requests would jump everyone as soon as its cap opens). One floor per
-- stream: its tickets queue in arrival order, so only the head's score is ever read. Refreshes
-- every stream of the key (key_streams lists only streams with tickets), as refresh_key would.
local function key_cap_opened(key)
  if not anyone_waiting() then return end
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. KEY.key_streams .. key)) do
    local s = key .. '|' .. pg
    local member = head(NS .. KEY.stream .. s)
    local head_start = num(redis.call('HGET', NS .. KEY.ticket .. handle_of(member), FIELD.head_start))
    redis.call('HSET', NS .. KEY.stream_floor, s, string.format('%.6f', NOW - head_start))
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group, true)
  end
end

-- A pool's in-flight count or cap changed: each of its groups may enter or leave eligible.
local function refresh_pool(pool)
  if not anyone_waiting() then return end
  for _, group in ipairs(redis.call('SMEMBERS', NS .. KEY.pool_groups .. pool)) do
    refresh_pool_group(pool, group)
  end
end

local function enqueue(handle, key, pool, group, enq, head_start, borrow, chan, deadline, pref, avoid,
                       assoc, weight, estimate, budgets, revocable)
  local member = string.format('%016d:%s', redis.call('INCR', NS .. KEY.arrivals), handle)
  WAITING = redis.call('INCR', NS .. KEY.queued_total)
  local pg = pool .. '|' .. group
  redis.call('HSET', NS .. KEY.ticket .. handle, FIELD.member, member, FIELD.key, key, FIELD.pool, pool,
    FIELD.group, group, FIELD.enqueued_at, enq, FIELD.head_start, head_start, FIELD.borrow, borrow,
    FIELD.channel, chan, FIELD.deadline, deadline, FIELD.preference, pref, FIELD.avoid, avoid,
    FIELD.association, assoc, FIELD.fair_share_weight, weight, FIELD.estimate, estimate,
    FIELD.budgets, budgets or '', FIELD.revocable, revocable and '1' or '0')
  if assoc ~= '' then
    redis.call('SADD', NS .. KEY.association_keys .. assoc, key)
    redis.call('SADD', NS .. KEY.associations_waiting, assoc)
  end
  redis.call('ZADD', NS .. KEY.stream .. key .. '|' .. pg, enq - head_start, member)
  redis.call('ZADD', NS .. KEY.ticket_expiry, NOW + TICKET_TTL, handle)
  redis.call('ZADD', NS .. KEY.pool_tickets .. pool, enq, handle)
  hincr(KEY.queued_by_key, key, 1); hincr(KEY.queued_by_pool, pool, 1)
  hincr(KEY.queued_by_group, group, 1); hincr(KEY.queued_by_pool_group, pg, 1)
  redis.call('SADD', NS .. KEY.key_streams .. key, pg)
  redis.call('SADD', NS .. KEY.pool_groups .. pool, group)
  refresh_stream(key, pool, group)
  return member
end

-- Remove a waiting ticket; returns {member, key, pool, group, enq, chan, pref, avoid, assoc,
-- estimate, budgets, revocable, moved} or nil.
local function dequeue(handle)
  redis.call('ZREM', NS .. KEY.ticket_expiry, handle)
  local t = redis.call('HMGET', NS .. KEY.ticket .. handle, FIELD.member, FIELD.key, FIELD.pool,
    FIELD.group, FIELD.enqueued_at, FIELD.channel, FIELD.preference, FIELD.avoid, FIELD.association,
    FIELD.estimate, FIELD.budgets, FIELD.revocable, FIELD.moved)
  if not t[1] then return nil end
  local key, pool, group = t[2], t[3], t[4]
  local pg = pool .. '|' .. group
  local q = NS .. KEY.stream .. key .. '|' .. pg
  redis.call('DEL', NS .. KEY.ticket .. handle)
  WAITING = redis.call('DECR', NS .. KEY.queued_total)
  if WAITING <= 0 then redis.call('DEL', NS .. KEY.queued_total); WAITING = 0 end
  redis.call('ZREM', q, t[1])
  redis.call('ZREM', NS .. KEY.pool_tickets .. pool, handle)
  hincr(KEY.queued_by_key, key, -1); hincr(KEY.queued_by_pool, pool, -1)
  hincr(KEY.queued_by_group, group, -1)
  if hincr(KEY.queued_by_pool_group, pg, -1) <= 0 then
    redis.call('SREM', NS .. KEY.pool_groups .. pool, group)
  end
  if redis.call('ZCARD', q) == 0 then
    redis.call('SREM', NS .. KEY.key_streams .. key, pg)
    redis.call('HDEL', NS .. KEY.stream_floor, key .. '|' .. pg)
    if t[9] and t[9] ~= '' and redis.call('SCARD', NS .. KEY.key_streams .. key) == 0 then
      redis.call('SREM', NS .. KEY.association_keys .. t[9], key)
      if redis.call('SCARD', NS .. KEY.association_keys .. t[9]) == 0 then
        redis.call('SREM', NS .. KEY.associations_waiting, t[9])
      end
    end
  end
  refresh_stream(key, pool, group)
  return t
end

local function take(handle, key, pool, group, replica, borrowed, enq, expiry, assoc, estimate, budgets,
                    revocable, chan)
  local fields = {FIELD.key, key, FIELD.pool, pool, FIELD.group, group, FIELD.replica, replica,
    FIELD.borrowed, borrowed, FIELD.enqueued_at, enq, FIELD.granted_at, NOW}
  if revocable and borrowed == 1 then
    fields[#fields + 1] = FIELD.revocable; fields[#fields + 1] = 1
    fields[#fields + 1] = FIELD.channel; fields[#fields + 1] = chan
    redis.call('ZADD', NS .. KEY.revocable_leases .. group, NOW, handle)
  end
  if budgets and budgets ~= '' then
    fields[#fields + 1] = FIELD.budgets; fields[#fields + 1] = budgets
    fields[#fields + 1] = FIELD.budget_estimate; fields[#fields + 1] = estimate
  end
  local charged = assoc and assoc ~= '' and num(estimate) > 0
  if charged then
    fields[#fields + 1] = FIELD.association; fields[#fields + 1] = assoc
    fields[#fields + 1] = FIELD.estimate; fields[#fields + 1] = estimate
  end
  redis.call('HSET', NS .. KEY.lease .. handle, unpack(fields))
  if charged then charge(assoc, num(estimate)) end
  redis.call('ZADD', NS .. KEY.lease_expiry, expiry, handle)
  hcount(KEY.in_flight_by_key, key, 1); hcount(KEY.in_flight_by_pool, pool, 1)
  hcount(KEY.in_flight_by_group, group, 1); hcount(KEY.in_flight_by_replica, replica, 1)
  if borrowed == 1 then hcount(KEY.borrowed_by_pool, pool, 1) end
  replica_changed(group, replica, false)
  refresh_key(key); refresh_pool(pool)
  GRANTED[handle] = {borrowed, NOW - enq, replica}
end

-- Give a lease back. `moving`: its request goes straight back to the queue (its replica failed
-- it), so its key's cap has not really opened and its other waiting tickets gain no rank.
-- Returns the lease's {key, pool, group, borrowed, replica, association, estimate, revocable,
-- asked_back, granted_at}, or false when it was gone.
local function free(handle, moving)
  local l = redis.call('HMGET', NS .. KEY.lease .. handle, FIELD.key, FIELD.pool, FIELD.group,
    FIELD.borrowed, FIELD.replica, FIELD.association, FIELD.estimate, FIELD.revocable, FIELD.asked_back,
    FIELD.granted_at)
  redis.call('ZREM', NS .. KEY.lease_expiry, handle)
  if not l[1] then return false end
  redis.call('DEL', NS .. KEY.lease .. handle)
  if l[8] then redis.call('ZREM', NS .. KEY.revocable_leases .. l[3], handle) end
  if l[9] then hincr(KEY.revocations_pending, l[3], -1) end
  -- It never ran: its estimate comes back (the grant on another replica charges it again).
  if moving and l[6] then charge(l[6], -num(l[7])) end
  -- (Whether its key was at its cap matters only to tickets waiting behind it.)
  local was_capped = anyone_waiting() and not key_open(l[1])
  hcount(KEY.in_flight_by_key, l[1], -1); hcount(KEY.in_flight_by_pool, l[2], -1)
  hcount(KEY.in_flight_by_group, l[3], -1)
  if l[5] then hcount(KEY.in_flight_by_replica, l[5], -1) end
  if l[4] == '1' then hcount(KEY.borrowed_by_pool, l[2], -1) end
  if l[5] then replica_changed(l[3], l[5], true) else LOADS[l[3]] = nil end
  DIRTY[l[3]] = true
  if was_capped and not moving then key_cap_opened(l[1]) else refresh_key(l[1]) end
  refresh_pool(l[2])
  return l
end

local function grant(member, group)
  local handle = handle_of(member)
  -- The lease expires when the ticket would have: one TTL after its process last showed life,
  -- so a grant to a process that has just died is still gone within one TTL of its death.
  local expiry = tonumber(redis.call('ZSCORE', NS .. KEY.ticket_expiry, handle)) or (NOW + TTL)
  local t = dequeue(handle)
  if not t then  -- cannot happen while the indexes are consistent; never loop on it
    redis.call('ZREM', NS .. KEY.eligible .. group, member)
    redis.call('ZREM', NS .. KEY.borrower_heads .. group, member)
    return
  end
  local key, pool, group, enq = t[2], t[3], t[4], tonumber(t[5])
  local replica = choose_replica(group, t[7] or '', t[8] or '')
  -- Borrowed: granted beyond the key's or the pool's cap, out of otherwise idle slots.
  local borrowed = ((not key_open(key)) or (not pool_open(pool))) and 1 or 0
  take(handle, key, pool, group, replica, borrowed, enq, expiry, t[9], t[10], t[11], t[12] == '1', t[6])
  if not t[13] then note_grant(key, group) end  -- (work given back and granted again is no progress)
  if handle ~= QUIET then
    redis.call('PUBLISH', t[6],
      handle .. '|' .. string.format('%.6f', NOW - enq) .. '|' .. borrowed .. '|' .. replica)
  end
end

