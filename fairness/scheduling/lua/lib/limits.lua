-- lib/limits.lua: budgets (reserved, settled, rolling windows) and GCRA rate limits.

-- Budgets and rate limits (limits.py builds their arguments), in as few Redis calls as they can.
-- A budget window is one hash, budget_window .. field: budget_reserved = what admitted requests
-- have reserved (their estimate), budget_settled = settled weighted tokens, or for a rolling window
-- budget_settled .. <bucket number> per bucket of its 24. field is "<holder-period>|<window start>"
-- (calendar) or "<holder-period>|r<bucket s>". Rate limits are GCRA: hash rate_limits, limit name
-- -> its theoretical arrival time.
local function rolling_bucket(field)
  return tonumber(string.match(field, '|r(%d+)$'))
end

-- {field, ttl, limit, used + reserved, settled} of each budget in `spec` ("field~ttl~limit,...");
-- settled: its window has settled some use, so its hash exists and has its expiry.
local function read_budgets(spec)
  local out = {}
  for field, ttl, limit in string.gmatch(spec or '', '([^,~]+)~([^,~]+)~([^,]+)') do
    local bucket, taken, settled = rolling_bucket(field), 0, false
    if bucket then
      local now_bucket, names = math.floor(NOW / bucket), {FIELD.budget_reserved}
      for i = 0, 23 do names[#names + 1] = FIELD.budget_settled .. (now_bucket - i) end
      for i, v in ipairs(redis.call('HMGET', NS .. KEY.budget_window .. field, unpack(names))) do
        taken = taken + num(v)
        settled = settled or (i > 1 and v ~= false)
      end
    else
      local v = redis.call('HMGET', NS .. KEY.budget_window .. field, FIELD.budget_settled,
        FIELD.budget_reserved)
      taken, settled = num(v[1]) + num(v[2]), v[1] ~= false
    end
    out[#out + 1] = {field, tonumber(ttl), tonumber(limit), taken, settled}
  end
  return out
end

-- The index (1-based) of the first budget this request would start over, or nil.
local function over_budget(read)
  for i, b in ipairs(read) do
    if b[4] >= b[3] then return i end
  end
  return nil
end

-- `ttl`: nil when the hash is known to have its expiry already.
local function bump(key, field, amount, ttl)
  local value = tonumber(redis.call('HINCRBYFLOAT', key, field, amount))
  if ttl and value == amount then redis.call('EXPIRE', key, math.max(1, math.ceil(ttl))) end  -- a new window
  if value < 0 then redis.call('HSET', key, field, 0) end  -- never below nothing
end

-- `read` (read_budgets of the same spec in this call, or nil): a window that has settled use
-- keeps its expiry, so its reservation sets none.
local function reserve_budgets(spec, amount, sign, read)
  local i = 0
  for field, ttl in string.gmatch(spec or '', '([^,~]+)~([^,~]+)~[^,]+') do
    i = i + 1
    local settled = read and read[i] and read[i][5]
    bump(NS .. KEY.budget_window .. field, FIELD.budget_reserved, sign * amount,
      (not settled) and tonumber(ttl) or nil)
  end
end

-- What the request really used goes to its windows; its reservation (if still held) comes back.
local function settle_budgets(spec, used, reserved)
  for field, ttl in string.gmatch(spec or '', '([^,~]+)~([^,~]+)~[^,]+') do
    local key, bucket = NS .. KEY.budget_window .. field, rolling_bucket(field)
    local counter = FIELD.budget_settled
    if bucket then
      local now_bucket = math.floor(NOW / bucket)
      counter = FIELD.budget_settled .. now_bucket
      redis.call('HDEL', key, FIELD.budget_settled .. (now_bucket - 24),  -- slid out
        FIELD.budget_settled .. (now_bucket - 25))
    end
    if used > 0 then bump(key, counter, used, tonumber(ttl)) end
    if reserved > 0 then bump(key, FIELD.budget_reserved, -reserved, tonumber(ttl)) end
  end
end

-- The least any budget has left once this request's `amount` is reserved, or ''.
local function budget_remaining(read, amount)
  local low = nil
  for _, b in ipairs(read) do
    local left = b[3] - b[4] - amount
    if not low or left < low then low = left end
  end
  return low and string.format('%.0f', math.max(0, low)) or ''
end

-- The completion limit a request may run to within its budgets. `spec` is
-- "prompt~weight~most~least": its weighted prompt tokens, one completion token's weight, the
-- most it would run to, and the least worth running. Returns the index of the budget with the
-- least room and the limit, or that index and nil when not even `least` fits.
local function completion_room(read, spec)
  local prompt, weight, most, least = string.match(spec, '^([^~]+)~([^~]+)~([^~]+)~([^~]+)$')
  prompt, weight, most, least = tonumber(prompt), tonumber(weight), tonumber(most), tonumber(least)
  local tightest, room = nil, nil
  for i, b in ipairs(read) do
    local left = b[3] - b[4]
    if not room or left < room then tightest, room = i, left end
  end
  local limit = most
  if weight > 0 then limit = math.min(most, math.floor((room - prompt) / weight)) end
  if limit < least then return tightest, nil end
  return tightest, limit
end

-- {name, per_minute, tokens} of each limit in `spec` ("name~per_minute~tokens,..."), and their
-- theoretical arrival times in one call.
local function read_rates(spec)
  local limits, names = {}, {}
  for name, per_minute, tokens in string.gmatch(spec or '', '([^,~]+)~([^,~]+)~([^,]+)') do
    limits[#limits + 1] = {name, tonumber(per_minute), tokens == '1'}
    names[#names + 1] = name
  end
  local tats = #names > 0 and redis.call('HMGET', NS .. KEY.rate_limits, unpack(names)) or {}
  return limits, tats
end

-- GCRA. Requests may come in bursts of a twentieth of the per-minute rate (three seconds'
-- worth), so a rate holds closely over minutes; tokens in bursts of a minute's worth (one long
-- answer fits). Returns nil and the apply function, or the index refused and seconds until it
-- would pass.
local function check_rates(spec, estimate)
  local limits, tats = read_rates(spec)
  local updates = {}
  for i, l in ipairs(limits) do
    local period = 60 / l[2]
    local amount = l[3] and math.max(0, estimate) or 1
    local burst = l[3] and math.max(l[2], amount) or math.max(1, math.ceil(l[2] / 20))
    local new_tat = math.max(num(tats[i]), NOW) + amount * period
    local excess = new_tat - NOW - burst * period
    if excess > 1e-9 then return i, excess end
    updates[#updates + 1] = l[1]
    updates[#updates + 1] = string.format('%.6f', new_tat)
  end
  return nil, function()
    if #updates > 0 then redis.call('HSET', NS .. KEY.rate_limits, unpack(updates)) end
  end
end

-- A tokens-per-minute limiter counted the estimate; the real count replaces it.
local function settle_rates(spec, used, estimate)
  local limits, tats = read_rates(spec)
  local updates = {}
  for i, l in ipairs(limits) do
    if l[3] and tats[i] then
      updates[#updates + 1] = l[1]
      updates[#updates + 1] = string.format('%.6f', math.max(NOW, tonumber(tats[i]) + (used - estimate) * 60 / l[2]))
    end
  end
  if #updates > 0 then redis.call('HSET', NS .. KEY.rate_limits, unpack(updates)) end
end

