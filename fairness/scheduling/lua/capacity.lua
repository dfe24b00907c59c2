-- capacity.lua: set a capacity group's replicas and their engine slots (max_num_seqs; 0 while a
-- replica is down), and grant whatever the new capacity allows.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  group    ARGV[6] "epsilon|floor" of its bounded-load routing
-- ARGV[7]  the config epoch's key    ARGV[8] the epoch the caller read its replicas under; "-": it
--          read none (Redis had lost it), so any epoch set since makes it stale; "": any
-- ARGV[9]  hold (s): when Redis had lost the group (restarted empty), grant nothing for this long,
--          so the gateway processes first count their running requests' leases again (retake)
-- ARGV[10..] replica name, slots (integer >= 0), ... (names in a stable order)
-- Returns  the group's leases in flight, or -1 when the caller's replicas are stale (the epoch
--          moved on since it read them): a process that has not reloaded yet must not undo the
--          statement of one that has.
-- A replica that leaves the group keeps counting its leases until they end; it gets no new ones.
local group = ARGV[5]
local epoch = redis.call('GET', ARGV[7])
if ARGV[8] == '-' then
  if epoch then return -1 end
elseif ARGV[8] ~= '' and epoch and epoch ~= ARGV[8] then
  return -1
end
reap()
if tonumber(ARGV[9]) > 0 and redis.call('HEXISTS', NS .. KEY.group_capacity, group) == 0 then
  redis.call('HSET', NS .. KEY.group_hold, group, NOW + tonumber(ARGV[9]))
end
local names, total = {}, 0
for i = 10, #ARGV, 2 do
  names[#names + 1] = ARGV[i]
  total = total + tonumber(ARGV[i + 1])
  redis.call('HSET', NS .. KEY.replica_slots, ARGV[i], ARGV[i + 1])
end
local listed = {}
for _, name in ipairs(names) do listed[name] = true end
for _, name in ipairs(replicas_of(group)) do
  if not listed[name] then redis.call('HDEL', NS .. KEY.replica_slots, name) end
end
redis.call('HSET', NS .. KEY.group_replicas, group, table.concat(names, ','))
redis.call('HSET', NS .. KEY.group_routing, group, ARGV[6])
redis.call('HSET', NS .. KEY.group_capacity, group, total)
REPLICAS[group], LOADS[group] = nil, nil
DIRTY[group] = true
for _, name in ipairs(names) do  -- a pin's replica and slots are the group's
  local pin = group .. ' ' .. name
  REPLICAS[pin], LOADS[pin] = nil, nil
  if num(redis.call('HGET', NS .. KEY.queued_by_group, pin)) > 0 then DIRTY[pin] = true end
end
pump_dirty()
ask_revocable(group)  -- fewer slots may leave no spare, even with nobody waiting
return num(redis.call('HGET', NS .. KEY.in_flight_by_group, group))
