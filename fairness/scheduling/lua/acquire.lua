-- acquire.lua: take a lease at once if the demand is admissible, else queue a ticket.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[ACQUIRE.<name>], in the order of admission.py's ACQUIRE_ARGUMENTS from ARGV[5]:
--   handle                   the future lease id
--   key, pool, group         key id, pool (tier), capacity group
--   key_cap, pool_cap        the key's cap; the pool's ("" = none)
--   head_start               head start (s)
--   borrow                   1 = it may borrow idle slots beyond its caps, 0 = not
--   max_queued_per_key       max queued per key (-1 = no limit)
--   enqueued_at, deadline    its place in line; when its ticket leaves the queue
--   channel                  pub/sub channel of the caller's process, where its later grant is announced
--   preference, avoid        replica preference ("a,b", or ""); replica to avoid (or "")
--   moving                   1 = the handle's lease (whose replica failed the request) is given back and
--                            the request queued again in its old place; 0 = a new request
--   report_unknown_capacity  1 = answer {capacity_unknown} when the group's capacity is unknown (Redis
--                            lost it), 0 = queue anyway
--   association, share       association charged ("" = none); its normalised share S
--   fair_share_weight        the tier's fair-share weight (s)
--   half_life                usage half-life (s)
--   estimate                 the request's estimated weighted tokens, charged to the association when
--                            granted
--   budgets                  "field~ttl~limit,..." (lib/limits.lua): refused when one is used up, else the
--                            estimate is reserved in each
--   rate_limits              "name~per_minute~tokens,..."
--   revocable                1 = a borrowed grant may take the reserve but a spare slot, and is asked back
--                            when needed (lib/revocable.lua); granted within its caps, it is no chat that
--                            wants a spare
--   max_queued_per_tier      max queued in the pool (tier) across its keys (-1 = no limit)
--   max_queued_total         max queued in the namespace, every tier and group together (-1 = no limit)
--   completion               with budgets, its completion "prompt~weight~most~least" (lib/limits.lua
--                            completion_room), or "": the estimate becomes its weighted prompt and the
--                            completion limit its budgets leave, and that is what is reserved, charged and
--                            answered (a limit below least: {over_budget})
--   repeated                 1 = a repeated call for this handle (it may hold a ticket or lease already),
--                            0 = the first
-- Returns, first the state (lib/state.lua's REPLY; admission.py's Reply):
--          {granted, borrowed 0/1, queued_seconds, replica, budget left, limit}  granted now (no
--              message is published); budget left: the least any of its budgets has left after
--              its reservation, or ''; limit: the completion limit granted, or ''
--          {queued, member, hold, budget left, limit, held by}  queued; the grant comes by pub/sub.
--              hold: until when the group grants nothing (a restart), else 0. held by: what keeps
--              it waiting now (the request log's): 'person_cap' (its key's cap, its person's in
--              its tier), 'tier_pool' (its tier's pool cap), 'no_slot' (first in line, no slot
--              free), 'fair_share_order' (others ahead of it in the order)
--          {over_budget, index}                its index-th budget is used up
--          {rate_limited, index, seconds}      its index-th rate limit refuses it for that long
--          {queue_full, retry_after_seconds, bound}  the key ('key'), its tier ('tier') or
--              everyone ('total') already has max queued tickets
--          {capacity_unknown}                  the group's capacity is unknown: state it, call again
local handle, key = ARGV[ACQUIRE.handle], ARGV[ACQUIRE.key]
local pool, group = ARGV[ACQUIRE.pool], ARGV[ACQUIRE.group]
local key_cap, pool_cap = ARGV[ACQUIRE.key_cap], ARGV[ACQUIRE.pool_cap]
local head_start, borrow = tonumber(ARGV[ACQUIRE.head_start]), ARGV[ACQUIRE.borrow]
local max_queued, enq = tonumber(ARGV[ACQUIRE.max_queued_per_key]), tonumber(ARGV[ACQUIRE.enqueued_at])
local deadline, chan = tonumber(ARGV[ACQUIRE.deadline]), ARGV[ACQUIRE.channel]
local pref, avoid = ARGV[ACQUIRE.preference], ARGV[ACQUIRE.avoid]
local assoc, moving = ARGV[ACQUIRE.association], ARGV[ACQUIRE.moving] == '1'
local revocable = ARGV[ACQUIRE.revocable] == '1'
QUIET = handle
-- The dead's leases and tickets are reaped when this call needs a slot or a place in line (below),
-- or when its budgets would refuse or limit it (a dead lease's reservation comes back).
if ARGV[ACQUIRE.report_unknown_capacity] == '1' and #replicas_of(group) == 0
    and redis.call('HEXISTS', NS .. KEY.group_capacity, group) == 0 then
  return {REPLY.capacity_unknown}
end
if moving then free(handle, true) end
state_fair_share(assoc, ARGV[ACQUIRE.share], ARGV[ACQUIRE.half_life])

-- The latest demand states the caps; a changed cap changes who is eligible.
if redis.call('HGET', NS .. KEY.key_cap, key) ~= key_cap then
  redis.call('HSET', NS .. KEY.key_cap, key, key_cap)
  refresh_key(key)
end
if redis.call('HGET', NS .. KEY.pool_cap, pool) ~= (pool_cap ~= '' and pool_cap or false) then
  if pool_cap == '' then redis.call('HDEL', NS .. KEY.pool_cap, pool)
  else redis.call('HSET', NS .. KEY.pool_cap, pool, pool_cap) end
  refresh_pool(pool)
end
pump_dirty()

-- A retried call (same handle) must not queue or take twice.
if ARGV[ACQUIRE.repeated] == '1' then
  local existing = redis.call('HGET', NS .. KEY.ticket .. handle, FIELD.member)
  if existing then return {REPLY.queued, existing} end
  local leased = redis.call('HMGET', NS .. KEY.lease .. handle, FIELD.borrowed, FIELD.enqueued_at,
    FIELD.granted_at, FIELD.replica)
  if leased[1] then
    return {REPLY.granted, tonumber(leased[1]), string.format('%.6f', num(leased[3]) - num(leased[2])), leased[4]}
  end
end

-- Rate limits and budgets, for a new request (a moved one was admitted already): checked now,
-- applied once it is sure to be granted or queued.
local budgets, estimate = ARGV[ACQUIRE.budgets], num(ARGV[ACQUIRE.estimate])
local apply_rates, read, limit = nil, {}, ''
local estimated = ARGV[ACQUIRE.estimate]
if not moving then
  if budgets ~= '' then
    -- The request runs on no more than its budgets leave, so concurrent ones cannot overspend.
    -- Returns the budget refusing it, or nil and its estimate and completion limit (nil: no ask).
    local completion = ARGV[ACQUIRE.completion]
    local asked = (completion or '') ~= '' and completion or nil
    local function judge()
      read = read_budgets(budgets)
      local over = over_budget(read)
      if over then return over end
      if not asked then return nil, estimate end
      local tightest, granted = completion_room(read, asked)
      if not granted then return tightest end
      local prompt, weight = string.match(asked, '^([^~]+)~([^~]+)~')
      return nil, tonumber(prompt) + granted * tonumber(weight), granted
    end
    local refused, judged, granted = judge()
    -- Near a limit (refused, its completion cut, or no room for one more like it), the dead's
    -- reservations may be what stands in the way: reap and judge again. Elsewhere they only make
    -- the budget left look smaller until an upkeep reaps them (any process holding a lease
    -- reaps at every recheck).
    local most = asked and tonumber(string.match(asked, '^[^~]+~[^~]+~([^~]+)~'))
    if refused or (granted and granted < most) or (tonumber(budget_remaining(read, judged)) or math.huge) < judged then
      reap()
      refused, judged, granted = judge()
    end
    if refused then return {REPLY.over_budget, refused} end
    estimate = judged
    if granted then estimated, limit = string.format('%.17g', estimate), string.format('%.0f', granted) end
  end
  local rate_limits = ARGV[ACQUIRE.rate_limits]
  if rate_limits ~= '' then
    local refused, wait_or_apply = check_rates(rate_limits, estimate)
    if refused then return {REPLY.rate_limited, refused, string.format('%.3f', wait_or_apply)} end
    apply_rates = wait_or_apply
  end
else
  budgets = ''  -- its reservation stands from its first admission; the release settles it
end
local function admit_limits()
  if apply_rates then apply_rates() end
  if budgets ~= '' then reserve_budgets(budgets, estimate, 1, read) end
  return budget_remaining(read, estimate)
end

-- Fast path. After pumping, an eligible ticket waits only when the group is full, so an empty
-- l3 with a free slot means nobody is ahead of this demand. (The caps were just read above.)
local function queue_empty(zset)
  return not anyone_waiting() or redis.call('ZCARD', NS .. zset .. group) == 0
end
local function at_once()
  local free = free_slots(group)
  if free <= 0 or not queue_empty(KEY.eligible) then return nil end
  local borrowed = nil
  local open = num(redis.call('HGET', NS .. KEY.in_flight_by_key, key)) < num(key_cap)
    and (pool_cap == '' or num(redis.call('HGET', NS .. KEY.in_flight_by_pool, pool)) < num(pool_cap))
  if open then
    borrowed = 0
  elseif borrow == '1' and (free - 1 >= RESERVE or (revocable and free - 1 >= spare(group)))
      and queue_empty(KEY.borrower_heads) then
    borrowed = 1
  end
  if not borrowed then return nil end
  local left = admit_limits()
  local replica = choose_replica(group, pref, avoid)
  take(handle, key, pool, group, replica, borrowed, enq, NOW + TTL, assoc, estimated, budgets, revocable,
    chan)
  ask_revocable(group, borrowed == 0 and not revocable)  -- the spare may be gone now
  -- Granted at once while others wait: it took a slot they wait for, so the wait estimate counts
  -- its person's arrivals too (on a card nobody waits for, this costs nothing).
  if not moving and anyone_waiting() then note_arrival(key, pool, group, head_start) end
  return {REPLY.granted, borrowed, string.format('%.6f', NOW - enq), replica, left, limit}
end
local now = at_once()
if now then return now end
-- No room: drop the leases and tickets of processes that died, grant whom that lets in, try again.
reap()
pump_dirty()
now = at_once()
if now then return now end

-- A full queue: a place in it is free at the latest when its oldest ticket must leave (`soonest`:
-- that ticket's deadline).
local function full(soonest, bound)
  return {REPLY.queue_full, math.max(1, math.ceil((soonest or NOW) - NOW)), bound}
end
local function deadline_of(handle)
  return handle and num(redis.call('HGET', NS .. KEY.ticket .. handle, FIELD.deadline)) or nil
end
local function earlier(a, b)
  if a == nil or (b ~= nil and b < a) then return b end
  return a
end
-- The deadline of the oldest ticket of each pool (a pool's tickets share one longest wait).
local function soonest_in_pools(pools)
  local soonest = nil
  for _, p in ipairs(pools) do
    soonest = earlier(soonest, deadline_of(redis.call('ZRANGE', NS .. KEY.pool_tickets .. p, 0, 0)[1]))
  end
  return soonest
end

if max_queued >= 0 and num(redis.call('HGET', NS .. KEY.queued_by_key, key)) >= max_queued then
  local soonest = nil
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. KEY.key_streams .. key)) do
    local member = head(NS .. KEY.stream .. key .. '|' .. pg)
    if member then soonest = earlier(soonest, deadline_of(handle_of(member))) end
  end
  return full(soonest, 'key')
end
-- One key's bound does not stop many keys of a tier, nor many tiers, from holding more waiting
-- requests (each one an open connection) than the gateway has connections. A request within its
-- caps while redoable work borrows the group's slots is not bound by them: a slot is given back
-- for it at once (below), so it waits no longer than that.
local tier_max = tonumber(ARGV[ACQUIRE.max_queued_per_tier])
local total_max = tonumber(ARGV[ACQUIRE.max_queued_total])
-- (Leases asked back and not yet returned count: they give a slot back too.)
local revocable_running = redis.call('ZCARD', NS .. KEY.revocable_leases .. group) > 0
  or num(redis.call('HGET', NS .. KEY.revocations_pending, group)) > 0
if revocable_running and key_open(key) and pool_open(pool) then tier_max, total_max = -1, -1 end
if tier_max >= 0 and num(redis.call('HGET', NS .. KEY.queued_by_pool, pool)) >= tier_max then
  return full(soonest_in_pools({pool}), 'tier')
end
if total_max >= 0 then
  local waiting, pools = 0, {}
  local counts = redis.call('HGETALL', NS .. KEY.queued_by_pool)
  for i = 1, #counts, 2 do
    pools[#pools + 1] = counts[i]
    waiting = waiting + num(counts[i + 1])
  end
  if waiting >= total_max then return full(soonest_in_pools(pools), 'total') end
end

-- A request within its caps waits for a slot while redoable work borrows: the spare was too small.
-- (Not for work that can be redone itself: a batch key's own requests within its caps.)
if revocable_running and not revocable and key_open(key) and pool_open(pool) then chat_waits(group) end
local left = admit_limits()
if not moving then note_arrival(key, pool, group, head_start) end
local member = enqueue(handle, key, pool, group, enq, head_start, borrow, chan, deadline, pref,
  avoid, assoc, ARGV[ACQUIRE.fair_share_weight], estimated, budgets, revocable)
if moving then redis.call('HSET', NS .. KEY.ticket .. handle, FIELD.moved, 1) end
pump_dirty()
local g = GRANTED[handle]
if g then return {REPLY.granted, g[1], string.format('%.6f', g[2]), g[3], left, limit} end
-- Read only on this path (a request that waits), so a request granted at once pays nothing for it.
local function held_by()
  if not key_open(key) then return 'person_cap' end
  if not pool_open(pool) then return 'tier_pool' end
  if redis.call('ZRANGE', NS .. KEY.eligible .. group, 0, 0)[1] == member then return 'no_slot' end
  return 'fair_share_order'
end
return {REPLY.queued, member, redis.call('HGET', NS .. KEY.group_hold, group) or '0', left, limit, held_by()}
