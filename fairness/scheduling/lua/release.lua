-- release.lua: give a lease back, settle its association's charge, and grant whoever can now run.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[RELEASE.<name>], in the order of admission.py's RELEASE_ARGUMENTS from ARGV[5]:
--   handle         handle of the lease ("" for none: a charge alone)
--   association    association charged ("" = none)
--   used           weighted tokens the request really used
--   estimate       the estimate its grant charged already (so used - estimate is charged now)
--   budgets        its budgets (acquire's): the real count goes to their windows, the reserved
--                  estimate comes back
--   rate_limits    its rate limits: a token limit's estimate is replaced by the real count
--   half_life      the usage half-life (s), as acquire states it
--   retried        "1": the gateway's outbox sends again a release whose reply it never read. If
--                  the lease is gone and was not reaped, that first try ran here: nothing more is
--                  charged. (Where Redis lost its data since, the outbox sends a charge alone.)
-- Returns  1 if the lease was held, 0 if it was already gone (released or expired). Giving back
-- is idempotent; the charges (fair share, budgets' real counts) are not, so a caller sends it
-- once, or again only as `retried`.
-- (No reaping here: upkeep does it every second while anyone waits, and acquire when it needs a slot.)
HALF_LIFE = tonumber(ARGV[RELEASE.half_life])
local handle, assoc = ARGV[RELEASE.handle], ARGV[RELEASE.association]
local used, estimate = ARGV[RELEASE.used], ARGV[RELEASE.estimate]
local budgets, rate_limits = ARGV[RELEASE.budgets], ARGV[RELEASE.rate_limits]
local lease = handle ~= '' and free(handle)
local held = lease and true or false
if ARGV[RELEASE.retried] == '1' and not held and redis.call('ZREM', NS .. KEY.reaped, handle) == 0 then
  return 0
end
-- Its slot's pace, for the wait estimate, while anyone waits: the pace of a busy card, measured
-- at no cost to an idle one (and not of a lease asked back: its work was cut short).
if lease and not lease[9] and anyone_waiting() then note_service(lease[1], lease[2], lease[3], NOW - num(lease[10])) end
local amount = (tonumber(used) or 0) - (tonumber(estimate) or 0)
if assoc ~= '' and amount ~= 0 then charge(assoc, amount) end
-- The real count goes to the budgets however late; the reservation and the rate limiter's
-- estimate are settled only with the lease (an expired one gave its reservation back already).
if (budgets or '') ~= '' then settle_budgets(budgets, num(used), held and num(estimate) or 0) end
if held and (rate_limits or '') ~= '' then settle_rates(rate_limits, num(used), num(estimate)) end
pump_dirty()
return held and 1 or 0
