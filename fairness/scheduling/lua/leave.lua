-- leave.lua: a waiter gives up (cancelled, timed out, shutting down).
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  handle    ARGV[6] keep: 1 = if the ticket was granted meanwhile, keep the lease
-- Returns  {0}                             the ticket left the queue
--          {1, borrowed 0/1, queued_secs, replica}  granted meanwhile and keep=1: the lease stands
--          {2}                             it had been granted and keep=0: the lease is released
--          {-1}                            neither ticket nor lease exists
local handle = ARGV[5]
reap()
if withdraw(handle) then
  pump_dirty()
  return {0}
end
local l = redis.call('HMGET', NS .. KEY.lease .. handle, FIELD.borrowed, FIELD.enqueued_at, FIELD.granted_at,
  FIELD.replica)
if not l[1] then
  pump_dirty()
  return {-1}
end
if ARGV[6] == '1' then
  pump_dirty()
  return {1, tonumber(l[1]), string.format('%.6f', num(l[3]) - num(l[2])), l[4]}
end
local reserved = redis.call('HMGET', NS .. KEY.lease .. handle, FIELD.budgets, FIELD.budget_estimate)
free(handle)
if reserved[1] then reserve_budgets(reserved[1], num(reserved[2]), -1) end  -- it never ran
pump_dirty()
return {2}
