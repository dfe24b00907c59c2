-- lib/: helpers shared by every admission script, in parts that admission.py joins in this order:
-- state (here: the contract, the key layout, the call's state), replicas, fair_share, limits,
-- queue, revocable, upkeep; a part may use what the parts before it define. Not run on their own:
-- admission.py loads them once as the head of a Redis function library, and registers each entry
-- script as a function of it that calls begin(KEYS, ARGV) first, so the contract below holds for
-- all of them. (Loaded once, the helpers' closures are not built again on every call, as a
-- script's would be.)
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

