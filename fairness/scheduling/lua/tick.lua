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
  if redis.call('ZSCORE', NS .. 'lx', ARGV[i]) then
    redis.call('ZADD', NS .. 'lx', NOW + TTL, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
-- The count of waiting tickets, from the counts per group (it cannot drift for longer than this).
local waiting = 0
for _, v in ipairs(redis.call('HVALS', NS .. 'gq')) do waiting = waiting + num(v) end
if waiting > 0 then redis.call('SET', NS .. 'nq', waiting) else redis.call('DEL', NS .. 'nq') end
WAITING = waiting
rescore_waiting(1)
for _, group in ipairs(redis.call('HKEYS', NS .. 'gq')) do DIRTY[group] = true end
pump_dirty()
local news = {}
for i = 6 + n, #ARGV do
  local h = ARGV[i]
  if redis.call('ZSCORE', NS .. 'tx', h) then
    redis.call('ZADD', NS .. 'tx', NOW + TICKET_TTL, h)
  else
    local l = redis.call('HMGET', NS .. 'l:' .. h, 'b', 'enq', 'at', 'r')
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
