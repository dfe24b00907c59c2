-- lib/pace.lua: what the wait estimate (wait_estimate.py) needs measured: how long a lease is held
-- (the slots' pace), per tier and per person in a tier (one person's requests may be ten times
-- another's in one tier), and how often each person's requests arrive while others wait (who may
-- come in ahead, and at what pace their cap lets them), and how fast each person's waiting requests
-- are let through (the drain a borrower's wait is read from). Written by a release while anyone
-- waits, by a request that queues or is granted while anyone waits, and by a grant from the queue:
-- a card nobody waits for pays nothing for them.

-- How fast the measures forget: a service time's weight, an arrival's time constant (s).
local SERVICE_WEIGHT = 0.1
local ARRIVAL_SECONDS = 30

local function moving_mean(before, held)
  before = tonumber(before)
  return string.format('%.4f', before and before + SERVICE_WEIGHT * (held - before) or held)
end

-- A lease of `key` in `pool` on `group` was held `held` seconds, start to release.
local function note_service(key, pool, group, held)
  if held <= 0 then return end
  local by_pool, by_key = pool .. '|' .. group, key .. '|' .. group
  local pool_mean = redis.call('HGET', NS .. KEY.service_seconds, by_pool)
  local key_mean = redis.call('HGET', NS .. KEY.service_seconds_by_key, by_key)
  redis.call('HSET', NS .. KEY.service_seconds, by_pool, moving_mean(pool_mean, held))
  redis.call('HSET', NS .. KEY.service_seconds_by_key, by_key, moving_mean(key_mean, held))
end

-- A new request of `key` (in `pool`, with its head start) came for `group` while others wait: the key's arrival
-- rate is an exponentially decayed count (a rate per second once divided by the time constant),
-- stored "count|at|head start|pool".
local function note_arrival(key, pool, group, head_start)
  local field = key .. '|' .. group
  local stored = redis.call('HGET', NS .. KEY.arrival_rate, field)
  local count = 0
  if stored then
    local c, at = string.match(stored, '^([^|]+)|([^|]+)|')
    count = tonumber(c) * math.exp(-math.max(0, NOW - tonumber(at)) / ARRIVAL_SECONDS)
  end
  redis.call('HSET', NS .. KEY.arrival_rate, field,
    string.format('%.4f|%.3f|%s|%s', count + 1, NOW, head_start, pool))
end

-- A request of `key` that waited was granted (group `group`), for the first time: the key's drain is a decayed count like
-- its arrivals', stored "count|at|since". `since` is when this run of grants began (a count decayed
-- to almost nothing starts a new run), so that a run only seconds old is not read as a slow one.
local function note_grant(key, group)
  local field = key .. '|' .. group
  local stored = redis.call('HGET', NS .. KEY.drain_rate, field)
  local count, since = 0, NOW
  if stored then
    local c, at, s = string.match(stored, '^([^|]+)|([^|]+)|([^|]+)$')
    count = tonumber(c) * math.exp(-math.max(0, NOW - tonumber(at)) / ARRIVAL_SECONDS)
    if count >= 0.05 then since = tonumber(s) end
  end
  redis.call('HSET', NS .. KEY.drain_rate, field, string.format('%.4f|%.3f|%.3f', count + 1, NOW, since))
end
