-- failover.lua: a gateway process reached, through Redis Sentinel, a master it had not met before
-- (a promoted replica, or a restarted master). Replication is asynchronous, so a promoted replica
-- may lack the last leases its old master granted: as after a restart (capacity.lua), every group
-- grants nothing for the hold, so the gateway processes first count their running requests'
-- leases again (retake). Only the first process to reach this master begins the hold: the others
-- find its run id noted already.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  the master's run id (INFO server)    ARGV[6] hold (s)
-- Returns  1 if this call began the hold, 0 if this master was met before
local run_id = ARGV[5]
if redis.call('GET', NS .. KEY.master) == run_id then return 0 end
redis.call('SET', NS .. KEY.master, run_id)
local hold = NOW + tonumber(ARGV[6])
for _, group in ipairs(redis.call('HKEYS', NS .. KEY.group_capacity)) do
  local held = tonumber(redis.call('HGET', NS .. KEY.group_hold, group))
  if not held or held < hold then redis.call('HSET', NS .. KEY.group_hold, group, hold) end
end
return 1
