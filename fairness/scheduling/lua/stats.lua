-- stats.lua: the live counters, after reaping the dead (so a killed process's leases vanish here).
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- Returns  {cap, gin, gq, kin, kq, pin, pbin, pq, rcap, rin, oldest}: each a flat HGETALL-style list
--          {field, value, ...}; oldest = {pool, enqueued_at of its oldest waiting ticket, ...}
reap()
pump_dirty()
local out = {}
for _, name in ipairs({'cap', 'gin', 'gq', 'kin', 'kq', 'pin', 'pbin', 'pq', 'rcap', 'rin'}) do
  out[#out + 1] = redis.call('HGETALL', NS .. name)
end
local oldest = {}
for _, pool in ipairs(redis.call('HKEYS', NS .. 'pq')) do
  local r = redis.call('ZRANGE', NS .. 'pe:' .. pool, 0, 0, 'WITHSCORES')
  if r[2] then oldest[#oldest + 1] = pool; oldest[#oldest + 1] = r[2] end
end
out[#out + 1] = oldest
return out
