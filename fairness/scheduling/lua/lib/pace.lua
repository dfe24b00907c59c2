-- lib/pace.lua: what the wait estimate (wait_estimate.py) needs measured, per pool and group: how
-- long a lease is held (the slots' pace) and how often requests arrive that must wait (who may
-- come in ahead). Each is one small hash field, written by a release while anyone waits and by
-- a request that queues: a card nobody waits for pays nothing for them.

-- How fast the measures forget: a service time's weight, an arrival's time constant (s).
local SERVICE_WEIGHT = 0.1
local ARRIVAL_SECONDS = 30

-- A lease of `pool` on `group` was held `held` seconds, start to release.
local function note_service(pool, group, held)
  if held <= 0 then return end
  local field = pool .. '|' .. group
  local before = tonumber(redis.call('HGET', NS .. KEY.service_seconds, field))
  local mean = before and before + SERVICE_WEIGHT * (held - before) or held
  redis.call('HSET', NS .. KEY.service_seconds, field, string.format('%.4f', mean))
end

-- A new request of `pool` queued for `group`: its arrival rate is an exponentially decayed count
-- (a rate per second once divided by the time constant), stored "count|at|head start".
local function note_arrival(pool, group, head_start)
  local field = pool .. '|' .. group
  local stored = redis.call('HGET', NS .. KEY.arrival_rate, field)
  local count = 0
  if stored then
    local c, at = string.match(stored, '^([^|]+)|([^|]+)|')
    count = tonumber(c) * math.exp(-math.max(0, NOW - tonumber(at)) / ARRIVAL_SECONDS)
  end
  redis.call('HSET', NS .. KEY.arrival_rate, field,
    string.format('%.4f|%.3f|%s', count + 1, NOW, head_start))
end
