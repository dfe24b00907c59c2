-- lib/upkeep.lua: granting what fits (pump), tickets that leave, and reaping the dead's leases.

-- Grant as many tickets of `group` as its replicas' free slots allow: eligible tickets first, in score
-- order; borrowers only when no eligible ticket waits and the reserve would stay free (see
-- may_borrow); then ask revocable borrowers back if the spare is gone.
local function pump(group)
  if not anyone_waiting() then return end  -- (a slot that opens cannot take the spare away)
  for _ = 1, 1000 do
    local free = free_slots(group)
    local member = free > 0 and head(NS .. KEY.eligible .. group)
    if free > 0 and not member then
      member = head(NS .. KEY.borrower_heads .. group)
      if member and not may_borrow(member, free, group) then member = nil end
    end
    if not member then break end
    grant(member, group)
  end
  ask_revocable(group)
end

local function pump_dirty()
  for _ = 1, 1000 do
    local group = next(DIRTY)
    if not group then return end
    DIRTY[group] = nil
    pump(group)
  end
end

-- A ticket leaves without being granted (given up, timed out, expired): its budget reservation
-- comes back. (A moved request's ticket reserved nothing: its first grant's release settles.)
local function withdraw(handle)
  local t = dequeue(handle)
  if t and t[11] and t[11] ~= '' then reserve_budgets(t[11], num(t[10]), -1) end
  return t
end

-- Leases and tickets whose holder stopped renewing (a dead process) are dropped lazily, at the
-- start of every call; waiting tickets call in every few seconds, so someone always does this.
-- A dead holder's lease gives its budget reservation back: nobody will settle it.
local REAPED_KEPT = 3600  -- seconds: longer than any retry of a release waits for Redis

local function reap()
  local reaped = false
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', NS .. KEY.lease_expiry, '-inf', NOW, 'LIMIT', 0, 100)) do
    local l = redis.call('HMGET', NS .. KEY.lease .. h, FIELD.budgets, FIELD.budget_estimate)
    if free(h) then
      if l[1] then reserve_budgets(l[1], num(l[2]), -1) end
      redis.call('ZADD', NS .. KEY.reaped, NOW, h)
      reaped = true
    end
  end
  if reaped then redis.call('ZREMRANGEBYSCORE', NS .. KEY.reaped, '-inf', NOW - REAPED_KEPT) end
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', NS .. KEY.ticket_expiry, '-inf', NOW, 'LIMIT', 0, 100)) do
    withdraw(h)
  end
end
