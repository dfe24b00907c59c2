-- capacity.lua: set a capacity group's engine slots (sum of max_num_seqs over healthy replicas)
-- and grant whatever the new capacity allows.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib.lua)
-- ARGV[5]  group    ARGV[6] slots (integer >= 0)
-- Returns  the group's leases in flight
reap()
redis.call('HSET', NS .. 'cap', ARGV[5], ARGV[6])
DIRTY[ARGV[5]] = true
pump_dirty()
return num(redis.call('HGET', NS .. 'gin', ARGV[5]))
