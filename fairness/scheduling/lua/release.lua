-- release.lua: give a lease back and grant whoever can now run. Idempotent.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib.lua)
-- ARGV[5]  handle of the lease
-- Returns  1 if the lease was held, 0 if it was already gone (released or expired)
reap()
local held = free(ARGV[5])
pump_dirty()
return held and 1 or 0
