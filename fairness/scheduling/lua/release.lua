-- release.lua: give a lease back, settle its association's charge, and grant whoever can now run.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  handle of the lease ("" for none: a charge alone)
-- ARGV[6]  association charged ("" = none)    ARGV[7] weighted tokens the request really used
-- ARGV[8]  the estimate its grant charged already (so ARGV[7] - ARGV[8] is charged now)
-- ARGV[9]  its budgets (acquire.lua's ARGV[26]): the real count goes to their windows, the
--          reserved estimate comes back    ARGV[10] its rate limits: a token limit's estimate is
--          replaced by the real count
-- ARGV[11] the usage half-life (s), as acquire states it
-- Returns  1 if the lease was held, 0 if it was already gone (released or expired). Giving back
-- is idempotent; the charges (fair share, budgets' real counts) are not, so a caller sends it once.
-- (No reaping here: upkeep does it every second while anyone waits, and acquire when it needs a slot.)
HALF_LIFE = tonumber(ARGV[11])
local held = ARGV[5] ~= '' and free(ARGV[5])
local amount = (tonumber(ARGV[7]) or 0) - (tonumber(ARGV[8]) or 0)
if ARGV[6] ~= '' and amount ~= 0 then charge(ARGV[6], amount) end
-- The real count goes to the budgets however late; the reservation and the rate limiter's
-- estimate are settled only with the lease (an expired one gave its reservation back already).
if (ARGV[9] or '') ~= '' then settle_budgets(ARGV[9], num(ARGV[7]), held and num(ARGV[8]) or 0) end
if held and (ARGV[10] or '') ~= '' then settle_rates(ARGV[10], num(ARGV[7]), num(ARGV[8])) end
pump_dirty()
return held and 1 or 0
