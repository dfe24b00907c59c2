-- restore.lua: add the database's copy of fair-share usage back, once after Redis lost it.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5..] association, its usage decayed to now, association, usage, ...
-- Returns  1 if added, 0 if this Redis already has it (added before, or never lost).
-- Charges made since Redis restarted stay: decayed usage adds up.
reap()
if redis.call('EXISTS', NS .. KEY.usage_restored) == 1 then return 0 end
for i = 5, #ARGV - 1, 2 do
  local amount = tonumber(ARGV[i + 1]) or 0
  if amount > 0 then charge(ARGV[i], amount) end
end
redis.call('SET', NS .. KEY.usage_restored, '1')
pump_dirty()
return 1
