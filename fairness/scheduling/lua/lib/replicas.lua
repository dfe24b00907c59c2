-- lib/replicas.lua: a group's replicas, their slots and leases, and the replica a new lease runs on.

-- A pinned group, "<group> <replica>": the requests that must run on that one replica of the group
-- (a stored conversation lives only in its engine's memory). A space, which no group (model) or
-- replica (slug) name holds, separates the two. Nobody states its capacity: its replica and slots
-- are its group's, and a lease in either counts on the same replica.
local function pin_parts(group)
  return string.match(group, '^(.+) ([^ ]+)$')
end

local function replicas_of(group)
  local names = REPLICAS[group]
  if not names then
    names = {}
    local main, pinned = pin_parts(group)
    if pinned then
      for _, name in ipairs(replicas_of(main)) do
        if name == pinned then names[1] = name end  -- none once it leaves the group
      end
    else
      for name in string.gmatch(redis.call('HGET', NS .. KEY.group_replicas, group) or '', '[^,]+') do
        names[#names + 1] = name
      end
    end
    REPLICAS[group] = names
  end
  return names
end

-- The group's replicas' slots and leases: name -> number, and the names in order. Read once per
-- call and kept until a lease or the capacity changes them (take, free and capacity.lua forget it).
local function replica_load(group)
  local load = LOADS[group]
  if not load then
    local names = replicas_of(group)
    local slots, busy = {}, {}
    if #names > 0 then
      local caps = redis.call('HMGET', NS .. KEY.replica_slots, unpack(names))
      local ins = redis.call('HMGET', NS .. KEY.in_flight_by_replica, unpack(names))
      for i, name in ipairs(names) do slots[name] = num(caps[i]); busy[name] = num(ins[i]) end
    end
    load = {names, slots, busy}
    LOADS[group] = load
  end
  return load[1], load[2], load[3]
end

-- A lease of `group` on `replica` was taken or freed: the loads of the group and of that replica's
-- pin change alike, and a slot freed in one may be the other's to grant.
local function replica_changed(group, replica, freed)
  local main = (pin_parts(group)) or group
  local pin = main .. ' ' .. replica
  LOADS[main], LOADS[pin] = nil, nil
  if freed and anyone_waiting() then  -- (read once per call: nothing more while nobody waits)
    DIRTY[main] = true
    if num(redis.call('HGET', NS .. KEY.queued_by_group, pin)) > 0 then DIRTY[pin] = true end
  end
end

local function free_slots(group)
  local load = LOADS[group]
  local hold = load and load.hold
  local holder = (pin_parts(group)) or group  -- a pin holds while its group does
  if hold == nil then hold = redis.call('HGET', NS .. KEY.group_hold, holder) end
  if hold then
    if tonumber(hold) > NOW then return 0 end
    redis.call('HDEL', NS .. KEY.group_hold, holder)
  end
  local names, slots, busy = replica_load(group)
  LOADS[group].hold = false
  local free = 0
  for _, name in ipairs(names) do free = free + math.max(0, slots[name] - busy[name]) end
  return free
end

-- The replica a new lease of `group` runs on, or nil when none has a free slot.
-- `pref`: the replicas in the request's order of preference ("a,b": its conversation's
-- rendezvous order), or '' for no preference. Bounded load (Mirrokni et al.): the first in that
-- order whose load stays within ceil((1 + epsilon) * (in flight + 1) / serving replicas), or
-- within `floor` x its slots (a lightly loaded replica keeps its conversations: its prefix cache
-- is worth more than the balance); else the least utilised. `avoid` (a replica that just failed
-- this request) is taken only when no other has a free slot. routing.choose is the same rule.
local function choose_replica(group, pref, avoid)
  local names, slots, busy = replica_load(group)
  local serving, total = 0, 0
  for _, name in ipairs(names) do
    if slots[name] > 0 then serving = serving + 1; total = total + busy[name] end
  end
  local order = names
  if pref ~= '' then
    local params = redis.call('HGET', NS .. KEY.group_routing, group) or '0.25|0.375'
    local epsilon, floor = string.match(params, '^([^|]*)|(.*)$')
    local bound = math.ceil((1 + tonumber(epsilon)) * (total + 1) / math.max(1, serving) - 1e-9)
    order = {}
    for name in string.gmatch(pref, '[^,]+') do
      if slots[name] then
        order[#order + 1] = name
        local fits = math.max(bound, math.floor(tonumber(floor) * slots[name]))
        if name ~= avoid and busy[name] < slots[name] and busy[name] + 1 <= fits then return name end
      end
    end
  end
  if order ~= names then  -- then the replicas the preference did not name (a stale directory)
    for _, name in ipairs(names) do order[#order + 1] = name end
  end
  local best, best_use = nil, nil
  for _, name in ipairs(order) do
    if name ~= avoid and busy[name] < slots[name] then
      local use = busy[name] / slots[name]
      if best_use == nil or use < best_use then best, best_use = name, use end
    end
  end
  if not best and avoid ~= '' and slots[avoid] and busy[avoid] < slots[avoid] then best = avoid end
  return best
end

