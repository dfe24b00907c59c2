-- queue_view.lua: what the wait estimate (wait_estimate.py) replays for one group: its slots, the
-- leases running on them, every ticket waiting for them with what orders it, the caps that can
-- hold a ticket back, and the measured pace (lib/pace.lua). Read-only but for reaping the dead.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  group
-- ARGV[6]  a key (unit) whose in-flight count and cap to include even with nothing waiting ("" none)
-- ARGV[7], ARGV[8]  an association and its tier's fair-share weight: the fair-share delay a new
--          request of it would carry now
-- (A pin's view is its group's: a pin's requests take its group's slots.)
-- Returns  {{capacity, hold until, spare}, leases, tickets, keys, pools, floors, service, arrivals, delay,
--          service by key, drains}: (spare: the slots a revocable borrower leaves free, lib/revocable.lua)
--          leases  {key, pool, granted_at, revocable 0/1, asked back 0/1, ...}
--          tickets {handle, member, key, pool, group, enqueued_at, head_start, borrow, revocable,
--                   fair-share delay, deadline, ...}
--          keys    {key, in flight, cap, ...}; pools {pool, in flight, cap or '', ...}
--          floors  {"key|pool|group", floor, ...} of the group's streams
--          service, arrivals, service by key, drains: HGETALL of KEY.service_seconds,
--          KEY.arrival_rate, KEY.service_seconds_by_key and KEY.drain_rate
reap()
pump_dirty()
local extra_key = ARGV[6]
-- A pin's requests take its group's slots: a group's view holds its pins' leases and tickets too.
local group = (pin_parts(ARGV[5])) or ARGV[5]
local function ours(g) return g and (g == group or pin_parts(g) == group) end
local leases, tickets, keys, pools = {}, {}, {}, {}
local function append(list, ...)
  for _, value in ipairs({...}) do list[#list + 1] = value end
end
for _, h in ipairs(redis.call('ZRANGE', NS .. KEY.lease_expiry, 0, -1)) do
  local l = redis.call('HMGET', NS .. KEY.lease .. h, FIELD.group, FIELD.key, FIELD.pool, FIELD.granted_at,
    FIELD.revocable, FIELD.asked_back)
  if ours(l[1]) then
    append(leases, l[2], l[3], l[4], l[5] and '1' or '0', l[6] and '1' or '0')
    keys[l[2]] = true; pools[l[3]] = true
  end
end
for _, h in ipairs(redis.call('ZRANGE', NS .. KEY.ticket_expiry, 0, -1)) do
  local t = redis.call('HMGET', NS .. KEY.ticket .. h, FIELD.group, FIELD.member, FIELD.key, FIELD.pool,
    FIELD.enqueued_at, FIELD.head_start, FIELD.borrow, FIELD.revocable, FIELD.association,
    FIELD.fair_share_weight, FIELD.deadline)
  if ours(t[1]) then
    append(tickets, h, t[2], t[3], t[4], t[1], t[5], t[6], t[7], t[8],
      string.format('%.6f', fair_share_delay(t[9], t[10])), t[11])
    keys[t[3]] = true; pools[t[4]] = true
  end
end
if extra_key ~= '' then keys[extra_key] = true end
-- Whoever is expected to arrive: their caps hold their future requests back too.
local arrivals = redis.call('HGETALL', NS .. KEY.arrival_rate)
for i = 1, #arrivals, 2 do
  local key, g = string.match(arrivals[i], '^(.*)|([^|]*)$')
  if ours(g) then keys[key] = true; pools[string.match(arrivals[i + 1], '([^|]*)$')] = true end
end
local key_list, pool_list, floors = {}, {}, {}
for key in pairs(keys) do
  append(key_list, key, redis.call('HGET', NS .. KEY.in_flight_by_key, key) or '0',
    redis.call('HGET', NS .. KEY.key_cap, key) or '0')
end
for pool in pairs(pools) do
  append(pool_list, pool, redis.call('HGET', NS .. KEY.in_flight_by_pool, pool) or '0',
    redis.call('HGET', NS .. KEY.pool_cap, pool) or '')
  for key in pairs(keys) do
    for _, g in ipairs(redis.call('SMEMBERS', NS .. KEY.pool_groups .. pool)) do
      local floor = ours(g) and redis.call('HGET', NS .. KEY.stream_floor, key .. '|' .. pool .. '|' .. g)
      if floor then append(floors, key .. '|' .. pool .. '|' .. g, floor) end
    end
  end
end
return {
  {redis.call('HGET', NS .. KEY.group_capacity, group) or '0', redis.call('HGET', NS .. KEY.group_hold, group) or '0',
   spare(group)},
  leases, tickets, key_list, pool_list, floors,
  redis.call('HGETALL', NS .. KEY.service_seconds), arrivals,
  string.format('%.6f', fair_share_delay(ARGV[7], ARGV[8])),
  redis.call('HGETALL', NS .. KEY.service_seconds_by_key),
  redis.call('HGETALL', NS .. KEY.drain_rate),
}
