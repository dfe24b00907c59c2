-- release.lua: give a lease back, charge its association, and grant whoever can now run.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib.lua)
-- ARGV[5]  handle of the lease ("" for none: a charge alone)
-- ARGV[6]  association to charge ("" = none)    ARGV[7] weighted tokens to charge it
-- Returns  1 if the lease was held, 0 if it was already gone (released or expired). Giving back
-- is idempotent; the charge is not, so a caller sends it once.
reap()
local held = ARGV[5] ~= '' and free(ARGV[5])
local amount = tonumber(ARGV[7]) or 0
if ARGV[6] ~= '' and amount > 0 then charge(ARGV[6], amount) end
pump_dirty()
return held and 1 or 0
