-- lib.lua: helpers shared by every admission script. Not run on its own: admission.py loads it
-- once as the head of a Redis function library, and registers each entry script as a function of
-- it that calls begin(KEYS, ARGV) first, so the contract below holds for all of them. (Loaded once,
-- the helpers' closures are not built again on every call, as a script's would be.)
--
-- KEYS[1]  namespace, e.g. "gp:{adm}:". Every key touched is KEYS[1] .. suffix, so all of them
--          share the {adm} hash tag (one Redis Cluster slot); KEYS[1] routes the call there.
-- ARGV[1]  now (seconds, float, from the caller's injectable clock)
-- ARGV[2]  lease TTL (s): a lease not renewed for this long is dropped
-- ARGV[3]  ticket TTL (s): a waiting ticket not heartbeated for this long is dropped
--          (expiries are stored absolute, so processes with different TTLs coexist)
-- ARGV[4]  reserve: engine slots a borrowed grant must leave free
-- ARGV[5..] entry-script arguments
--
-- Layout (names are suffixes of KEYS[1]; k = key id, p = pool/tier, g = capacity group, h = handle):
--   cap, kcap, pcap              hashes: group capacity, key cap, pool cap (absent = no pool cap)
--   rcap, gr, route              hashes: replica -> its slots (0 while down); group -> its replicas
--                                ("a,b"); group -> "epsilon|floor" of its bounded-load routing
--   hold                         hash group -> until when it grants nothing (after a restart)
--   kin, pin, gin, pbin, rin     hashes: leases in flight per key, pool, group, replica; borrowed
--                                per pool. Their zeros stay (a field per person, pool, group and
--                                replica that ever ran): deleting them cost a command a counter
--                                on most releases; readers skip them
--   kq, pq, gq, pgq              hashes: tickets queued per key, pool, group, "p|g"
--   nq                           tickets queued in the namespace: while 0, a grant or a release
--                                skips every queue refresh and pump (most calls, on a card with
--                                room); tick recounts it from gq, so it cannot drift for long
--   l:h  lx                      lease hash (key pool group r b enq at); zset h -> expiry
--   t:h  tx                      ticket hash (m key pool group enq borrow chan deadline pref
--                                avoid);
--                                zset h -> expiry (last heartbeat + ticket TTL)
--   seq                          arrival counter; a ticket's member is "%016d:h" so equal scores
--                                sort by arrival
--   q:k|p|g                      a stream: one key's tickets for one group, member -> score
--   fl                           hash "k|p|g" -> floor: the stream's head scores at least this
--   l2:p|g                       heads of the streams of pool p whose key is under its cap
--   l3:g                         the best l2 head of every pool under its cap: the eligible set
--   b:g                          heads of all streams whose head ticket may borrow
--   idx                          which member each stream/pool currently has in l2/l3/b
--   ks:k  pg:p                   sets: "p|g" streams a key has queued; groups a pool has queued
--   pe:p                         zset h -> enqueued_at, for the longest wait
-- Revocable borrowing (work that can be redone: a batch runner's lines, a request whose answer
-- is not streamed; a ticket or lease field rv = 1; the lease keeps its process's channel chan):
-- such a borrower may take the reserve too, all but a spare while chats come (one slot, and one
-- more for each chat that still had to wait lately), every slot when none has for a while
-- (spare), and gives a slot back when asked, since it runs again later. A chat takes the spare
-- at once; whenever fewer slots are free than the spare plus the eligible tickets waiting, the
-- newest revocable lease of the group (the least work lost) is asked back ("revoke|h" on its
-- channel), so the next chat finds a spare again.
--   rv:g                         zset h -> granted at: revocable borrowed leases not yet asked
--   rvp                          hash group -> leases asked and not yet given back
--   act                          hash group -> when it last admitted or queued a request within
--                                its caps (and not itself redoable) while revocable leases ran;
--                                group|spare, group|spare_at: the spare, and when a chat that
--                                had to wait last raised it (spare)
-- Fair share (fair_share.py is the same arithmetic; a ticket also carries its association a and
-- its tier's fair-share weight fw):
--   fu                           hash association -> "usage|valued_at"; field * holds everyone's,
--                                likewise (association names are numbers)
--   fs                           hash association -> normalised share S; field * holds the
--                                half-life (s). The latest demand states both.
--   ak:a                         set: keys of association a with queued tickets, whose stream
--                                heads are scored again when a's usage changes
--   fa  fsr                      set: associations with queued tickets; when they were all last
--                                scored again (upkeep does it once a second: see rescore_waiting)
-- A grant charges its association the request's estimate (ticket/lease field est) at once, and
-- the release charges the difference to the real count: running work counts from its start.
--   fsok                         set once the database's copy of the usage has been added back
-- A grant only ever inspects the head of l3:g (or b:g), so its cost does not grow with the queue.
--
-- Every lease holds a slot on one replica, chosen when it is granted (choose_replica), so no
-- replica is ever given more than its slots, by any number of gateway processes; a group's free
-- slots are the sum of its replicas' (a replica holding more than its slots, after it shrank or
-- went down, counts as full, not as negative).

-- The call's state. Every entry function sets it afresh through begin: nothing outlives a call.
local NS, NOW, TTL, TICKET_TTL, RESERVE, IDX
local DIRTY      -- groups that may now be able to grant: pump them before returning
local GRANTED    -- handle -> {borrowed, queued_seconds} granted during this call
local QUIET      -- the caller's own handle: it learns of its grant from the reply, not pub/sub
local REPLICAS   -- group -> its replica names, read once per call
local LOADS      -- group -> {names, slots, busy, hold} read once per call, until a lease changes them
local WAITING    -- tickets queued in the namespace (nq), read at most once per call
local HALF_LIFE  -- the usage half-life, read once per call
local FACTORS    -- association -> F within this call; cleared by every charge

local function begin(keys, argv)
  NS = keys[1]
  NOW, TTL = tonumber(argv[1]), tonumber(argv[2])
  TICKET_TTL, RESERVE = tonumber(argv[3]), tonumber(argv[4])
  IDX = NS .. 'idx'
  DIRTY, GRANTED, QUIET, REPLICAS, HALF_LIFE, FACTORS = {}, {}, nil, {}, nil, {}
  LOADS, WAITING = {}, nil
end

local function num(x) return tonumber(x) or 0 end

-- A ticket's member is "%016d:h" (its arrival number, then its handle): the handle.
local function handle_of(member) return string.sub(member, 18) end

-- The first field of acquire's reply (admission.py's Reply names the same numbers; a test holds
-- the two together).
local REPLY = {granted = 1, queued = 0, queue_full = -1, capacity_unknown = -2, over_budget = -3,
  rate_limited = -4}

-- Whether any ticket waits, in any group: when none does, there is no stream to refresh, no
-- head to score again and nothing to pump.
local function anyone_waiting()
  if WAITING == nil then WAITING = num(redis.call('GET', NS .. 'nq')) end
  return WAITING > 0
end

local function hincr(hash, field, by)
  local v = redis.call('HINCRBY', NS .. hash, field, by)
  if v <= 0 then redis.call('HDEL', NS .. hash, field) end  -- keep the counters sparse
  return v
end

-- An in-flight counter: its zeros stay (see the layout above).
local function hcount(hash, field, by)
  return redis.call('HINCRBY', NS .. hash, field, by)
end

local function key_open(key)
  return num(redis.call('HGET', NS .. 'kin', key)) < num(redis.call('HGET', NS .. 'kcap', key))
end

local function pool_open(pool)
  local cap = redis.call('HGET', NS .. 'pcap', pool)
  return (not cap) or num(redis.call('HGET', NS .. 'pin', pool)) < num(cap)
end

local function replicas_of(group)
  local names = REPLICAS[group]
  if not names then
    names = {}
    for name in string.gmatch(redis.call('HGET', NS .. 'gr', group) or '', '[^,]+') do
      names[#names + 1] = name
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
      local caps = redis.call('HMGET', NS .. 'rcap', unpack(names))
      local ins = redis.call('HMGET', NS .. 'rin', unpack(names))
      for i, name in ipairs(names) do slots[name] = num(caps[i]); busy[name] = num(ins[i]) end
    end
    load = {names, slots, busy}
    LOADS[group] = load
  end
  return load[1], load[2], load[3]
end

local function free_slots(group)
  local load = LOADS[group]
  local hold = load and load.hold
  if hold == nil then hold = redis.call('HGET', NS .. 'hold', group) end
  if hold then
    if tonumber(hold) > NOW then return 0 end
    redis.call('HDEL', NS .. 'hold', group)
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
    local params = redis.call('HGET', NS .. 'route', group) or '0.25|0.375'
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

-- Fair share. Usage is kept as (value, when it was valued) and decayed on reading, so no call
-- ever walks every association. F = 2^(-U/S), U = usage / everyone's usage.
local function half_life()
  if not HALF_LIFE then HALF_LIFE = tonumber(redis.call('HGET', NS .. 'fs', '*')) or 604800 end
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
  local stored = redis.call('HMGET', NS .. 'fu', '*', assoc)
  local total, usage = decayed(stored[1]), decayed(stored[2])
  if total <= 0 or usage <= 0 then f = 1
  else
    local share = num(redis.call('HGET', NS .. 'fs', assoc))
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
  for _, key in ipairs(redis.call('SMEMBERS', NS .. 'ak:' .. assoc)) do
    for _, pg in ipairs(redis.call('SMEMBERS', NS .. 'ks:' .. key)) do
      local pool, group = string.match(pg, '^(.*)|([^|]*)$')
      refresh_stream(key, pool, group, true)
    end
  end
end

-- Charge `amount` weighted tokens to `assoc`, then score its waiting stream heads again.
-- A negative amount settles an estimate that was too high (never below nothing).
local function charge(assoc, amount)
  local stored = redis.call('HMGET', NS .. 'fu', assoc, '*')
  local usage = math.max(0, decayed(stored[1]) + amount)
  local total = math.max(usage, decayed(stored[2]) + amount)  -- everyone's covers anyone's
  redis.call('HSET', NS .. 'fu', assoc, string.format('%.17g|%.6f', usage, NOW),
    '*', string.format('%.17g|%.6f', total, NOW))
  FACTORS = {}
  rescore(assoc)
end

-- Everyone's factor drifts as the total grows, but a charge re-scores only its own association:
-- once a second (from any process's upkeep), score every waiting association again, so one that
-- is not being served is not left behind with the delay of an older, heavier moment.
local function rescore_waiting(interval)
  local last = tonumber(redis.call('GET', NS .. 'fsr'))
  if last and NOW - last < interval and NOW >= last then return end
  redis.call('SET', NS .. 'fsr', string.format('%.6f', NOW))
  FACTORS = {}
  for _, assoc in ipairs(redis.call('SMEMBERS', NS .. 'fa')) do rescore(assoc) end
end

-- The latest demand states its association's share and the half-life; a change re-scores.
local function state_fair_share(assoc, share, half_life_seconds)
  local stated = redis.call('HMGET', NS .. 'fs', '*', assoc ~= '' and assoc or '*')
  if stated[1] ~= half_life_seconds then
    redis.call('HSET', NS .. 'fs', '*', half_life_seconds)
    FACTORS = {}
  end
  HALF_LIFE = tonumber(half_life_seconds)
  if assoc ~= '' and stated[2] ~= share then
    redis.call('HSET', NS .. 'fs', assoc, share)
    FACTORS[assoc] = nil
    rescore(assoc)
  end
end

-- Budgets and rate limits (limits.py builds their arguments), in as few Redis calls as they can.
-- A budget window is one hash, bw:<field>: r = what admitted requests have reserved (their
-- estimate), u = settled weighted tokens, or for a rolling window u<bucket number> per bucket of
-- its 24. field is "<holder-period>|<window start>" (calendar) or "<holder-period>|r<bucket s>".
-- Rate limits are GCRA: hash rl, limit name -> its theoretical arrival time.
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
      local now_bucket, names = math.floor(NOW / bucket), {'r'}
      for i = 0, 23 do names[#names + 1] = 'u' .. (now_bucket - i) end
      for i, v in ipairs(redis.call('HMGET', NS .. 'bw:' .. field, unpack(names))) do
        taken = taken + num(v)
        settled = settled or (i > 1 and v ~= false)
      end
    else
      local v = redis.call('HMGET', NS .. 'bw:' .. field, 'u', 'r')
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
    bump(NS .. 'bw:' .. field, 'r', sign * amount, (not settled) and tonumber(ttl) or nil)
  end
end

-- What the request really used goes to its windows; its reservation (if still held) comes back.
local function settle_budgets(spec, used, reserved)
  for field, ttl in string.gmatch(spec or '', '([^,~]+)~([^,~]+)~[^,]+') do
    local key, bucket = NS .. 'bw:' .. field, rolling_bucket(field)
    local counter = 'u'
    if bucket then
      local now_bucket = math.floor(NOW / bucket)
      counter = 'u' .. now_bucket
      redis.call('HDEL', key, 'u' .. (now_bucket - 24), 'u' .. (now_bucket - 25))  -- slid out
    end
    if used > 0 then bump(key, counter, used, tonumber(ttl)) end
    if reserved > 0 then bump(key, 'r', -reserved, tonumber(ttl)) end
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
  local tats = #names > 0 and redis.call('HMGET', NS .. 'rl', unpack(names)) or {}
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
    if #updates > 0 then redis.call('HSET', NS .. 'rl', unpack(updates)) end
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
  if #updates > 0 then redis.call('HSET', NS .. 'rl', unpack(updates)) end
end

-- Put `member` (or nothing, when false) in zset `zkey` as the entry of `slot`. `rescored`: the
-- same member may now carry a different score.
local function set_entry(zkey, slot, member, score, group, rescored)
  local old = redis.call('HGET', IDX, slot)
  if old == member then
    if member and rescored then
      redis.call('ZADD', zkey, score, member)
      DIRTY[group] = true
    end
    return
  end
  if old then redis.call('ZREM', zkey, old) end
  if member then
    redis.call('ZADD', zkey, score, member)
    redis.call('HSET', IDX, slot, member)
    DIRTY[group] = true
  else
    redis.call('HDEL', IDX, slot)
  end
end

local function head(zkey)
  local r = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  return r[1] or false, r[2]
end

local function refresh_pool_group(pool, group, rescored)
  local member, score = false, nil
  if pool_open(pool) then member, score = head(NS .. 'l2:' .. pool .. '|' .. group) end
  set_entry(NS .. 'l3:' .. group, 'P|' .. pool .. '|' .. group, member, score, group, rescored)
end

refresh_stream = function(key, pool, group, rescored)
  local s = key .. '|' .. pool .. '|' .. group
  local member, score = head(NS .. 'q:' .. s)
  local borrower = false
  if member then
    local floor = redis.call('HGET', NS .. 'fl', s)
    if floor and tonumber(floor) > tonumber(score) then score = floor end
    local t = redis.call('HMGET', NS .. 't:' .. handle_of(member), 'borrow', 'a', 'fw')
    if t[1] == '1' then borrower = member end
    local delay = fair_share_delay(t[2], t[3])
    if delay > 0 then score = string.format('%.6f', tonumber(score) + delay) end
  end
  set_entry(NS .. 'l2:' .. pool .. '|' .. group, 'K|' .. s, key_open(key) and member, score, group,
    rescored)
  set_entry(NS .. 'b:' .. group, 'B|' .. s, borrower, score, group, rescored)
  refresh_pool_group(pool, group, rescored)
end

-- A key's in-flight count or cap changed: each of its streams may enter or leave l2.
local function refresh_key(key)
  if not anyone_waiting() then return end
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. 'ks:' .. key)) do
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group)
  end
end

-- A key at its cap gave a lease back. Its waiting tickets start ageing only now: time spent
-- queued behind one's own cap is not time denied by others, so it buys no rank over them (else
-- a key that queues many requests would jump everyone as soon as its cap opens). One floor per
-- stream: its tickets queue in arrival order, so only the head's score is ever read. Refreshes
-- every stream of the key (ks: lists only streams with tickets), as refresh_key would.
local function key_cap_opened(key)
  if not anyone_waiting() then return end
  for _, pg in ipairs(redis.call('SMEMBERS', NS .. 'ks:' .. key)) do
    local s = key .. '|' .. pg
    local member = head(NS .. 'q:' .. s)
    local head_start = num(redis.call('HGET', NS .. 't:' .. handle_of(member), 'hs'))
    redis.call('HSET', NS .. 'fl', s, string.format('%.6f', NOW - head_start))
    local pool, group = string.match(pg, '^(.*)|([^|]*)$')
    refresh_stream(key, pool, group, true)
  end
end

-- A pool's in-flight count or cap changed: each of its groups may enter or leave l3.
local function refresh_pool(pool)
  if not anyone_waiting() then return end
  for _, group in ipairs(redis.call('SMEMBERS', NS .. 'pg:' .. pool)) do
    refresh_pool_group(pool, group)
  end
end

local function enqueue(handle, key, pool, group, enq, head_start, borrow, chan, deadline, pref, avoid,
                       assoc, weight, estimate, budgets, revocable)
  local member = string.format('%016d:%s', redis.call('INCR', NS .. 'seq'), handle)
  WAITING = redis.call('INCR', NS .. 'nq')
  local pg = pool .. '|' .. group
  redis.call('HSET', NS .. 't:' .. handle, 'm', member, 'key', key, 'pool', pool, 'group', group,
    'enq', enq, 'hs', head_start, 'borrow', borrow, 'chan', chan, 'deadline', deadline,
    'pref', pref, 'avoid', avoid, 'a', assoc, 'fw', weight, 'est', estimate, 'bres', budgets or '',
    'rv', revocable and '1' or '0')
  if assoc ~= '' then
    redis.call('SADD', NS .. 'ak:' .. assoc, key)
    redis.call('SADD', NS .. 'fa', assoc)
  end
  redis.call('ZADD', NS .. 'q:' .. key .. '|' .. pg, enq - head_start, member)
  redis.call('ZADD', NS .. 'tx', NOW + TICKET_TTL, handle)
  redis.call('ZADD', NS .. 'pe:' .. pool, enq, handle)
  hincr('kq', key, 1); hincr('pq', pool, 1); hincr('gq', group, 1); hincr('pgq', pg, 1)
  redis.call('SADD', NS .. 'ks:' .. key, pg)
  redis.call('SADD', NS .. 'pg:' .. pool, group)
  refresh_stream(key, pool, group)
  return member
end

-- Remove a waiting ticket; returns {member, key, pool, group, enq, chan, pref, avoid, assoc,
-- estimate, budgets, revocable} or nil.
local function dequeue(handle)
  redis.call('ZREM', NS .. 'tx', handle)
  local t = redis.call('HMGET', NS .. 't:' .. handle, 'm', 'key', 'pool', 'group', 'enq', 'chan',
    'pref', 'avoid', 'a', 'est', 'bres', 'rv')
  if not t[1] then return nil end
  local key, pool, group = t[2], t[3], t[4]
  local pg = pool .. '|' .. group
  local q = NS .. 'q:' .. key .. '|' .. pg
  redis.call('DEL', NS .. 't:' .. handle)
  WAITING = redis.call('DECR', NS .. 'nq')
  if WAITING <= 0 then redis.call('DEL', NS .. 'nq'); WAITING = 0 end
  redis.call('ZREM', q, t[1])
  redis.call('ZREM', NS .. 'pe:' .. pool, handle)
  hincr('kq', key, -1); hincr('pq', pool, -1); hincr('gq', group, -1)
  if hincr('pgq', pg, -1) <= 0 then redis.call('SREM', NS .. 'pg:' .. pool, group) end
  if redis.call('ZCARD', q) == 0 then
    redis.call('SREM', NS .. 'ks:' .. key, pg)
    redis.call('HDEL', NS .. 'fl', key .. '|' .. pg)
    if t[9] and t[9] ~= '' and redis.call('SCARD', NS .. 'ks:' .. key) == 0 then
      redis.call('SREM', NS .. 'ak:' .. t[9], key)
      if redis.call('SCARD', NS .. 'ak:' .. t[9]) == 0 then redis.call('SREM', NS .. 'fa', t[9]) end
    end
  end
  refresh_stream(key, pool, group)
  return t
end

local function take(handle, key, pool, group, replica, borrowed, enq, expiry, assoc, estimate, budgets,
                    revocable, chan)
  local fields = {'key', key, 'pool', pool, 'group', group, 'r', replica, 'b', borrowed, 'enq', enq, 'at', NOW}
  if revocable and borrowed == 1 then
    fields[#fields + 1] = 'rv'; fields[#fields + 1] = 1
    fields[#fields + 1] = 'chan'; fields[#fields + 1] = chan
    redis.call('ZADD', NS .. 'rv:' .. group, NOW, handle)
  end
  if budgets and budgets ~= '' then
    fields[#fields + 1] = 'bres'; fields[#fields + 1] = budgets
    fields[#fields + 1] = 'best'; fields[#fields + 1] = estimate
  end
  local charged = assoc and assoc ~= '' and num(estimate) > 0
  if charged then
    fields[#fields + 1] = 'a'; fields[#fields + 1] = assoc
    fields[#fields + 1] = 'est'; fields[#fields + 1] = estimate
  end
  redis.call('HSET', NS .. 'l:' .. handle, unpack(fields))
  if charged then charge(assoc, num(estimate)) end
  redis.call('ZADD', NS .. 'lx', expiry, handle)
  hcount('kin', key, 1); hcount('pin', pool, 1); hcount('gin', group, 1); hcount('rin', replica, 1)
  if borrowed == 1 then hcount('pbin', pool, 1) end
  LOADS[group] = nil
  refresh_key(key); refresh_pool(pool)
  GRANTED[handle] = {borrowed, NOW - enq, replica}
end

-- Give a lease back. `moving`: its request goes straight back to the queue (its replica failed
-- it), so its key's cap has not really opened and its other waiting tickets gain no rank.
local function free(handle, moving)
  local l = redis.call('HMGET', NS .. 'l:' .. handle, 'key', 'pool', 'group', 'b', 'r', 'a', 'est', 'rv',
    'asked')
  redis.call('ZREM', NS .. 'lx', handle)
  if not l[1] then return false end
  redis.call('DEL', NS .. 'l:' .. handle)
  if l[8] then redis.call('ZREM', NS .. 'rv:' .. l[3], handle) end
  if l[9] then hincr('rvp', l[3], -1) end
  -- It never ran: its estimate comes back (the grant on another replica charges it again).
  if moving and l[6] then charge(l[6], -num(l[7])) end
  -- (Whether its key was at its cap matters only to tickets waiting behind it.)
  local was_capped = anyone_waiting() and not key_open(l[1])
  hcount('kin', l[1], -1); hcount('pin', l[2], -1); hcount('gin', l[3], -1)
  if l[5] then hcount('rin', l[5], -1) end
  if l[4] == '1' then hcount('pbin', l[2], -1) end
  LOADS[l[3]] = nil
  DIRTY[l[3]] = true
  if was_capped and not moving then key_cap_opened(l[1]) else refresh_key(l[1]) end
  refresh_pool(l[2])
  return true
end

local function grant(member, group)
  local handle = handle_of(member)
  -- The lease expires when the ticket would have: one TTL after its process last showed life,
  -- so a grant to a process that has just died is still gone within one TTL of its death.
  local expiry = tonumber(redis.call('ZSCORE', NS .. 'tx', handle)) or (NOW + TTL)
  local t = dequeue(handle)
  if not t then  -- cannot happen while the indexes are consistent; never loop on it
    redis.call('ZREM', NS .. 'l3:' .. group, member)
    redis.call('ZREM', NS .. 'b:' .. group, member)
    return
  end
  local key, pool, group, enq = t[2], t[3], t[4], tonumber(t[5])
  local replica = choose_replica(group, t[7] or '', t[8] or '')
  -- Borrowed: granted beyond the key's or the pool's cap, out of otherwise idle slots.
  local borrowed = ((not key_open(key)) or (not pool_open(pool))) and 1 or 0
  take(handle, key, pool, group, replica, borrowed, enq, expiry, t[9], t[10], t[11], t[12] == '1', t[6])
  if handle ~= QUIET then
    redis.call('PUBLISH', t[6],
      handle .. '|' .. string.format('%.6f', NOW - enq) .. '|' .. borrowed .. '|' .. replica)
  end
end

-- The slots a revocable borrower leaves free. None when no chat has come for SPARE_HOLD seconds
-- (or the deployment keeps no reserve), so that redoable work fills the card and the first chat
-- waits only for one slot to be given back. While chats come (the group admitted or queued a
-- request within its caps in that time, hash act), one, and one more each time a chat still had
-- to wait for a slot (more came at once than the spare, before a slot asked back returned), at
-- most the reserve; it shrinks back by one every SPARE_EASE seconds no chat waited. So the spare
-- follows how many chats really come at once, and idles no more slots than that.
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
  local act = redis.call('HMGET', NS .. 'act', group, group .. '|spare', group .. '|spare_at')
  local last = tonumber(act[1])
  if not (last and NOW - last < SPARE_HOLD) then return 0 end
  return eased(act[2], act[3])
end

-- A request within its caps came while revocable leases ran: chats are coming.
local function chat_came(group)
  redis.call('HSET', NS .. 'act', group, string.format('%.3f', NOW))
end

-- ... and it must wait for a slot. While chats come that means the spare was too small: one more
-- from now on. (The first chat after a quiet spell waits for a slot to be given back by design.)
local function chat_waits(group)
  local act = redis.call('HMGET', NS .. 'act', group, group .. '|spare', group .. '|spare_at')
  local last = tonumber(act[1])
  local level = 1
  if RESERVE > 0 and last and NOW - last < SPARE_HOLD then
    level = math.min(RESERVE, eased(act[2], act[3]) + 1)
  end
  local at = string.format('%.3f', NOW)
  redis.call('HSET', NS .. 'act', group, at, group .. '|spare', level, group .. '|spare_at', at)
end

-- Fewer slots are free than the spare plus one per eligible ticket waiting: ask revocable
-- borrowers to give slots back, beyond the asks still outstanding. Not while a restart hold
-- makes the group look full. `came`: a request within its caps was just granted (recorded only
-- while revocable leases run: otherwise nothing is asked, and the grant costs no command more).
local function ask_revocable(group, came)
  if redis.call('ZCARD', NS .. 'rv:' .. group) == 0 then return end
  if came then chat_came(group) end
  if redis.call('HEXISTS', NS .. 'hold', group) == 1 then return end
  local wanted = redis.call('ZCARD', NS .. 'l3:' .. group) + spare(group) - free_slots(group)
  local asked = num(redis.call('HGET', NS .. 'rvp', group))
  for _ = 1, wanted - asked do
    local handle = redis.call('ZRANGE', NS .. 'rv:' .. group, 0, 0, 'REV')[1]  -- the newest
    if not handle then return end
    redis.call('ZREM', NS .. 'rv:' .. group, handle)
    local chan = redis.call('HGET', NS .. 'l:' .. handle, 'chan')
    if chan then
      redis.call('HSET', NS .. 'l:' .. handle, 'asked', 1)
      hincr('rvp', group, 1)
      redis.call('PUBLISH', chan, 'revoke|' .. handle)
    end
  end
end

-- Whether the waiting borrower `member` may have one of `free` slots: RESERVE must stay free, or
-- only the spare for a revocable one.
local function may_borrow(member, free, group)
  if free - 1 >= RESERVE then return true end
  return free - 1 >= spare(group) and redis.call('HGET', NS .. 't:' .. handle_of(member), 'rv') == '1'
end

-- Grant as many tickets of `group` as its replicas' free slots allow: eligible tickets first, in score
-- order; borrowers only when no eligible ticket waits and the reserve would stay free (see
-- may_borrow); then ask revocable borrowers back if the spare is gone.
local function pump(group)
  if not anyone_waiting() then return end  -- (a slot that opens cannot take the spare away)
  for _ = 1, 1000 do
    local free = free_slots(group)
    local member = free > 0 and head(NS .. 'l3:' .. group)
    if free > 0 and not member then
      member = head(NS .. 'b:' .. group)
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
local function reap()
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', NS .. 'lx', '-inf', NOW, 'LIMIT', 0, 100)) do
    local l = redis.call('HMGET', NS .. 'l:' .. h, 'bres', 'best')
    if free(h) and l[1] then reserve_budgets(l[1], num(l[2]), -1) end
  end
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', NS .. 'tx', '-inf', NOW, 'LIMIT', 0, 100)) do
    withdraw(h)
  end
end
