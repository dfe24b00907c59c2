-- tick.lua: one process's periodic upkeep, in one call: renew its leases, heartbeat its waiting
-- tickets, reap the dead, recount the waiting, score waiting associations again (at most once a second), and pump
-- every group with a queue (covers lost pub/sub messages).
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  n, the number of lease handles that follow
-- ARGV[6 .. 5+n]  lease handles to renew;  ARGV[6+n ..]  handles of this process's waiting tickets
-- Returns  {lost, news}: lost = lease handles no longer held (expired: renew came too late);
--          news = flat {handle, state, borrowed, queued_secs, replica, ...} for waiting tickets
--          that are no longer queued: state 1 = granted, -1 = gone (its ticket expired; queue it
--          again)
local n = tonumber(ARGV[5])
reap()
local lost = {}
for i = 6, 5 + n do
  if redis.call('ZSCORE', NS .. KEY.lease_expiry, ARGV[i]) then
    redis.call('ZADD', NS .. KEY.lease_expiry, NOW + TTL, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
-- The count of waiting tickets, from the counts per group (it cannot drift for longer than this).
local waiting = 0
for _, v in ipairs(redis.call('HVALS', NS .. KEY.queued_by_group)) do waiting = waiting + num(v) end
if waiting > 0 then redis.call('SET', NS .. KEY.queued_total, waiting)
else redis.call('DEL', NS .. KEY.queued_total) end
WAITING = waiting
rescore_waiting(1)
for _, group in ipairs(redis.call('HKEYS', NS .. KEY.queued_by_group)) do DIRTY[group] = true end
pump_dirty()
local news = {}
for i = 6 + n, #ARGV do
  local h = ARGV[i]
  if redis.call('ZSCORE', NS .. KEY.ticket_expiry, h) then
    redis.call('ZADD', NS .. KEY.ticket_expiry, NOW + TICKET_TTL, h)
  else
    local l = redis.call('HMGET', NS .. KEY.lease .. h, FIELD.borrowed, FIELD.enqueued_at, FIELD.granted_at,
      FIELD.replica)
    if l[1] then
      news[#news + 1] = h; news[#news + 1] = 1; news[#news + 1] = tonumber(l[1])
      news[#news + 1] = string.format('%.6f', num(l[3]) - num(l[2])); news[#news + 1] = l[4]
    else
      news[#news + 1] = h; news[#news + 1] = -1; news[#news + 1] = 0; news[#news + 1] = '0'
      news[#news + 1] = ''
    end
  end
end
return {lost, news}
