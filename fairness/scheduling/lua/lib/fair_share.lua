-- lib/fair_share.lua: usage that decays, each association's factor, and the delay it gives a ticket.

-- Fair share. Usage is kept as (value, when it was valued) and decayed on reading, so no call
-- ever walks every association. F = 2^(-U/S), U = usage / everyone's usage.
local function half_life()
  if not HALF_LIFE then HALF_LIFE = tonumber(redis.call('HGET', NS .. KEY.fair_shares, '*')) or 604800 end
  return HALF_LIFE
end

local function decayed(stored)
  if not stored then return 0 end
  local value, at = string.match(stored, '^([^|]*)|(.*)$')
  return tonumber(value) * 2 ^ (-math.max(0, NOW - tonumber(at)) / half_life())
end

local function factor(assoc)
  local f = FACTORS[assoc]
  if f then return f end
  local stored = redis.call('HMGET', NS .. KEY.fair_share_usage, '*', assoc)
  local total, usage = decayed(stored[1]), decayed(stored[2])
  if total <= 0 or usage <= 0 then f = 1
  else
    local share = num(redis.call('HGET', NS .. KEY.fair_shares, assoc))
    f = share > 0 and 2 ^ (-(usage / total) / share) or 0
  end
  FACTORS[assoc] = f
  return f
end

-- How much later than its place in line a ticket ranks: up to its tier's weight, in seconds, for
-- an association that has used far beyond its share; nothing for one that has used nothing.
local function fair_share_delay(assoc, weight)
  if not assoc or assoc == '' or num(weight) <= 0 then return 0 end
  return num(weight) * (1 - factor(assoc))
end

local refresh_stream

-- Score the waiting stream heads of `assoc` again: its factor changed. Only its own streams:
-- everyone else's factor moves too (the total changed) but far less, and is caught up at their
-- own next charge or change of head.
local function rescore(assoc)
  if not anyone_waiting() then return end
  for _, key in ipairs(redis.call('SMEMBERS', NS .. KEY.association_keys .. assoc)) do
    for _, pg in ipairs(redis.call('SMEMBERS', NS .. KEY.key_streams .. key)) do
      local pool, group = string.match(pg, '^(.*)|([^|]*)$')
      refresh_stream(key, pool, group, true)
    end
  end
end

-- Charge `amount` weighted tokens to `assoc`, then score its waiting stream heads again.
-- A negative amount settles an estimate that was too high (never below nothing).
local function charge(assoc, amount)
  local stored = redis.call('HMGET', NS .. KEY.fair_share_usage, assoc, '*')
  local usage = math.max(0, decayed(stored[1]) + amount)
  local total = math.max(usage, decayed(stored[2]) + amount)  -- everyone's covers anyone's
  redis.call('HSET', NS .. KEY.fair_share_usage, assoc, string.format('%.17g|%.6f', usage, NOW),
    '*', string.format('%.17g|%.6f', total, NOW))
  FACTORS = {}
  rescore(assoc)
end

-- Everyone's factor drifts as the total grows, but a charge re-scores only its own association:
-- once a second (from any process's upkeep), score every waiting association again, so one that
-- is not being served is not left behind with the delay of an older, heavier moment.
local function rescore_waiting(interval)
  local last = tonumber(redis.call('GET', NS .. KEY.rescored_at))
  if last and NOW - last < interval and NOW >= last then return end
  redis.call('SET', NS .. KEY.rescored_at, string.format('%.6f', NOW))
  FACTORS = {}
  for _, assoc in ipairs(redis.call('SMEMBERS', NS .. KEY.associations_waiting)) do rescore(assoc) end
end

-- The latest demand states its association's share and the half-life; a change re-scores.
local function state_fair_share(assoc, share, half_life_seconds)
  local stated = redis.call('HMGET', NS .. KEY.fair_shares, '*', assoc ~= '' and assoc or '*')
  if stated[1] ~= half_life_seconds then
    redis.call('HSET', NS .. KEY.fair_shares, '*', half_life_seconds)
    FACTORS = {}
  end
  HALF_LIFE = tonumber(half_life_seconds)
  if assoc ~= '' and stated[2] ~= share then
    redis.call('HSET', NS .. KEY.fair_shares, assoc, share)
    FACTORS[assoc] = nil
    rescore(assoc)
  end
end

