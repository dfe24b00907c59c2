-- retake.lua: a lease this process holds was found missing at renewal (Redis restarted empty, or
-- the process stalled past its TTL) while its request still runs on the engine: count it again,
-- even above the caps, so the counts stay true and the next grants wait until it ends.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  handle    ARGV[6] key id    ARGV[7] pool    ARGV[8] group    ARGV[9] replica
-- ARGV[10] borrowed 0/1    ARGV[11] enqueued_at
-- Returns  1 if the lease was taken again, 0 if it was there after all
reap()
if redis.call('EXISTS', NS .. KEY.lease .. ARGV[5]) == 1 then return 0 end
take(ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11]), NOW + TTL)
return 1
