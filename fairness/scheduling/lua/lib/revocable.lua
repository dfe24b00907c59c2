-- lib/revocable.lua: borrowing that can be redone: the spare it leaves, and asking it back.

-- The slots a revocable borrower leaves free. None when no chat has come for SPARE_HOLD seconds
-- (or the deployment keeps no reserve), so that redoable work fills the card and the first chat
-- waits only for one slot to be given back. While chats come (the group admitted or queued a
-- request within its caps in that time, hash chat_activity), one, and one more each time a chat
-- still had to wait for a slot (more came at once than the spare, before a slot asked back
-- returned), at most the reserve; it shrinks back by one every SPARE_EASE seconds no chat waited.
-- So the spare follows how many chats really come at once, and idles no more slots than that.
local SPARE_HOLD = 60
local SPARE_EASE = 30

-- The spare while chats come: `level` (1 when never raised) less one per SPARE_EASE seconds since
-- it was raised at `raised_at`.
local function eased(level, raised_at)
  local steps = math.floor(math.max(0, NOW - num(raised_at)) / SPARE_EASE)
  return math.max(1, math.min(RESERVE, num(level) - steps))
end

local function spare(group)
  if RESERVE <= 0 then return 0 end
  local act = redis.call('HMGET', NS .. KEY.chat_activity, group, group .. '|spare', group .. '|spare_at')
  local last = tonumber(act[1])
  if not (last and NOW - last < SPARE_HOLD) then return 0 end
  return eased(act[2], act[3])
end

-- A request within its caps came while revocable leases ran: chats are coming.
local function chat_came(group)
  redis.call('HSET', NS .. KEY.chat_activity, group, string.format('%.3f', NOW))
end

-- ... and it must wait for a slot. While chats come that means the spare was too small: one more
-- from now on. (The first chat after a quiet spell waits for a slot to be given back by design.)
local function chat_waits(group)
  local act = redis.call('HMGET', NS .. KEY.chat_activity, group, group .. '|spare', group .. '|spare_at')
  local last = tonumber(act[1])
  local level = 1
  if RESERVE > 0 and last and NOW - last < SPARE_HOLD then
    level = math.min(RESERVE, eased(act[2], act[3]) + 1)
  end
  local at = string.format('%.3f', NOW)
  redis.call('HSET', NS .. KEY.chat_activity, group, at, group .. '|spare', level, group .. '|spare_at', at)
end

-- A pin's eligible tickets may run only on its replica (lib/replicas.lua): ask the group's
-- revocable borrowers running there, newest first, for as many slots as wait beyond the replica's
-- free ones. An asked lease leaves revocable_leases, so it is asked once; its group counts it
-- pending until it is given back, as for its own asks.
local function ask_back_on(main, replica, pin)
  if redis.call('ZCARD', NS .. KEY.revocable_leases .. main) == 0 then return end
  if redis.call('HEXISTS', NS .. KEY.group_hold, main) == 1 then return end
  local wanted = redis.call('ZCARD', NS .. KEY.eligible .. pin) - free_slots(pin)
  if wanted <= 0 then return end
  for _, handle in ipairs(redis.call('ZRANGE', NS .. KEY.revocable_leases .. main, 0, -1, 'REV')) do
    local l = redis.call('HMGET', NS .. KEY.lease .. handle, FIELD.replica, FIELD.channel)
    if l[1] == replica and l[2] then
      redis.call('ZREM', NS .. KEY.revocable_leases .. main, handle)
      redis.call('HSET', NS .. KEY.lease .. handle, FIELD.asked_back, 1)
      hincr(KEY.revocations_pending, main, 1)
      redis.call('PUBLISH', l[2], 'revoke|' .. handle)
      wanted = wanted - 1
      if wanted <= 0 then return end
    end
  end
end

-- Fewer slots are free than the spare plus one per eligible ticket waiting: ask revocable
-- borrowers to give slots back, beyond the asks still outstanding. Not while a restart hold
-- makes the group look full. `came`: a request within its caps was just granted (recorded only
-- while revocable leases run: otherwise nothing is asked, and the grant costs no command more).
local function ask_revocable(group, came)
  local main, pinned = pin_parts(group)
  if pinned then return ask_back_on(main, pinned, group) end
  if redis.call('ZCARD', NS .. KEY.revocable_leases .. group) == 0 then return end
  if came then chat_came(group) end
  if redis.call('HEXISTS', NS .. KEY.group_hold, group) == 1 then return end
  local wanted = redis.call('ZCARD', NS .. KEY.eligible .. group) + spare(group) - free_slots(group)
  local asked = num(redis.call('HGET', NS .. KEY.revocations_pending, group))
  for _ = 1, wanted - asked do
    local handle = redis.call('ZRANGE', NS .. KEY.revocable_leases .. group, 0, 0, 'REV')[1]  -- the newest
    if not handle then return end
    redis.call('ZREM', NS .. KEY.revocable_leases .. group, handle)
    local chan = redis.call('HGET', NS .. KEY.lease .. handle, FIELD.channel)
    if chan then
      redis.call('HSET', NS .. KEY.lease .. handle, FIELD.asked_back, 1)
      hincr(KEY.revocations_pending, group, 1)
      redis.call('PUBLISH', chan, 'revoke|' .. handle)
    end
  end
end

-- Whether the waiting borrower `member` may have one of `free` slots: RESERVE must stay free, or
-- only the spare for a revocable one.
local function may_borrow(member, free, group)
  if free - 1 >= RESERVE then return true end
  return free - 1 >= spare(group)
    and redis.call('HGET', NS .. KEY.ticket .. handle_of(member), FIELD.revocable) == '1'
end

