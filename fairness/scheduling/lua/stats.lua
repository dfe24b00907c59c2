-- stats.lua: the live counters, after reaping the dead (so a killed process's leases vanish here).
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- Returns  {group_capacity, in_flight_by_group, queued_by_group, in_flight_by_key, queued_by_key,
--          in_flight_by_pool, borrowed_by_pool, queued_by_pool, replica_slots, in_flight_by_replica,
--          oldest} (KEY in lib/state.lua; live_counts.py reads them in this order): each a flat
--          HGETALL-style list {field, value, ...}; oldest = {pool, enqueued_at of its oldest
--          waiting ticket, ...}
reap()
pump_dirty()
local out = {}
for _, name in ipairs({KEY.group_capacity, KEY.in_flight_by_group, KEY.queued_by_group, KEY.in_flight_by_key,
                       KEY.queued_by_key, KEY.in_flight_by_pool, KEY.borrowed_by_pool, KEY.queued_by_pool,
                       KEY.replica_slots, KEY.in_flight_by_replica}) do
  out[#out + 1] = redis.call('HGETALL', NS .. name)
end
local oldest = {}
for _, pool in ipairs(redis.call('HKEYS', NS .. KEY.queued_by_pool)) do
  local r = redis.call('ZRANGE', NS .. KEY.pool_tickets .. pool, 0, 0, 'WITHSCORES')
  if r[2] then oldest[#oldest + 1] = pool; oldest[#oldest + 1] = r[2] end
end
out[#out + 1] = oldest
return out
