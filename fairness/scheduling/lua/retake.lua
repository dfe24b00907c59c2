-- retake.lua: a lease this process holds was found missing at renewal (Redis restarted empty, or
-- the process stalled past its TTL) while its request still runs on the engine: count it again,
-- even above the caps, so the counts stay true and the next grants wait until it ends.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[RETAKE.<name>], in the order of admission.py's RETAKE_ARGUMENTS from ARGV[5]:
--   handle, key, pool, group, replica    the lease's handle, key id, pool, group and replica
--   borrowed                             0/1
--   enqueued_at                          its place in line
-- Returns  1 if the lease was taken again, 0 if it was there after all
local handle = ARGV[RETAKE.handle]
reap()
if redis.call('EXISTS', NS .. KEY.lease .. handle) == 1 then return 0 end
take(handle, ARGV[RETAKE.key], ARGV[RETAKE.pool], ARGV[RETAKE.group], ARGV[RETAKE.replica],
  tonumber(ARGV[RETAKE.borrowed]), tonumber(ARGV[RETAKE.enqueued_at]), NOW + TTL)
return 1
