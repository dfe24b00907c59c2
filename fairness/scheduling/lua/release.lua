-- release.lua: give a lease back, settle its association's charge, and grant whoever can now run.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib.lua)
-- ARGV[5]  handle of the lease ("" for none: a charge alone)
-- ARGV[6]  association charged ("" = none)    ARGV[7] weighted tokens the request really used
-- ARGV[8]  the estimate its grant charged already (so ARGV[7] - ARGV[8] is charged now)
-- Returns  1 if the lease was held, 0 if it was already gone (released or expired). Giving back
-- is idempotent; the charge is not, so a caller sends it once.
reap()
local held = ARGV[5] ~= '' and free(ARGV[5])
local amount = (tonumber(ARGV[7]) or 0) - (tonumber(ARGV[8]) or 0)
if ARGV[6] ~= '' and amount ~= 0 then charge(ARGV[6], amount) end
pump_dirty()
return held and 1 or 0
