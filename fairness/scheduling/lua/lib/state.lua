-- lib/: helpers shared by every admission script, in parts that admission.py joins in this order:
-- state (here: the contract, the key layout, the call's state), replicas, fair_share, limits,
-- pace, queue, revocable, upkeep; a part may use what the parts before it define. Not run on their own:
-- admission.py loads them once as the head of a Redis function library, and registers each entry
-- script as a function of it that calls begin(KEYS, ARGV) first, so the contract below holds for
-- all of them. (Loaded once, the helpers' closures are not built again on every call, as a
-- script's would be.) After the parts it adds each long entry script's argument positions
-- (ACQUIRE, RELEASE, RETAKE: ARGV[ACQUIRE.key]), from the names admission.py passes them by.
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
-- Revocable borrowing (work that can be redone: a batch runner's lines, a request whose answer
-- is not streamed; a ticket or lease field revocable = 1; the lease keeps its process's channel):
-- such a borrower may take the reserve too, all but a spare while chats come (one slot, and one
-- more for each chat that still had to wait lately), every slot when none has for a while
-- (spare), and gives a slot back when asked, since it runs again later. A chat takes the spare
-- at once; whenever fewer slots are free than the spare plus the eligible tickets waiting, the
-- newest revocable lease of the group (the least work lost) is asked back ("revoke|h" on its
-- channel), so the next chat finds a spare again.
--
-- Fair share (fair_share.py is the same arithmetic; a ticket also carries its association and
-- its tier's fair-share weight). A grant charges its association the request's estimate at once,
-- and the release charges the difference to the real count: running work counts from its start.
--
-- A grant only ever inspects the head of the group's eligible set (or its borrower heads), so its
-- cost does not grow with the queue.
--
-- Every lease holds a slot on one replica, chosen when it is granted (choose_replica), so no
-- replica is ever given more than its slots, by any number of gateway processes; a group's free
-- slots are the sum of its replicas' (a replica holding more than its slots, after it shrank or
-- went down, counts as full, not as negative).

-- The key layout: each name is the suffix of KEYS[1] that NS .. KEY.name spells (a family of keys
-- then appends its member's name; k = key id, p = pool/tier, g = capacity group, h = handle). The
-- stored suffixes stay short and never change: during a rolling upgrade old and new gateways
-- share one Redis, and renamed keys would split admission state between them. Python spells the
-- ones it reads as keyspace.ADMISSION_<NAME> (fairness/store/keyspace.py; a test holds the two
-- together).
local KEY = {
  group_capacity = 'cap',           -- hash group -> its slots (the sum of its replicas')
  key_cap = 'kcap',                 -- hash key -> its cap
  pool_cap = 'pcap',                -- hash pool -> its cap (absent = no pool cap)
  replica_slots = 'rcap',           -- hash replica -> its slots (0 while down)
  group_replicas = 'gr',            -- hash group -> its replicas ("a,b")
  group_routing = 'route',          -- hash group -> "epsilon|floor" of its bounded-load routing
  group_hold = 'hold',              -- hash group -> until when it grants nothing (after a restart)
  master = 'mst',                   -- string: run id of the master that last began a hold (failover.lua)
  -- The in-flight counts keep their zeros (a field per person, pool, group and replica that ever
  -- ran): deleting them cost a command a counter on most releases; readers skip them.
  in_flight_by_key = 'kin',         -- hash key -> its leases in flight
  in_flight_by_pool = 'pin',        -- hash pool -> its leases in flight
  in_flight_by_group = 'gin',       -- hash group -> its leases in flight
  in_flight_by_replica = 'rin',     -- hash replica -> the leases holding its slots
  borrowed_by_pool = 'pbin',        -- hash pool -> its borrowed leases in flight
  queued_by_key = 'kq',             -- hash key -> its tickets queued
  queued_by_pool = 'pq',            -- hash pool -> its tickets queued
  queued_by_group = 'gq',           -- hash group -> its tickets queued
  queued_by_pool_group = 'pgq',     -- hash "p|g" -> tickets queued
  -- Tickets queued in the namespace: while 0, a grant or a release skips every queue refresh and
  -- pump (most calls, on a card with room); tick recounts it from queued_by_group, so it cannot
  -- drift for long.
  queued_total = 'nq',
  lease = 'l:',                     -- l:h  hash: the lease (FIELD below)
  lease_expiry = 'lx',              -- zset h -> expiry of its lease
  -- zset h -> when its lease was reaped (its holder never gave it back), kept REAPED_KEPT seconds:
  -- a release retried after its reply was lost settles only a lease still held or reaped here,
  -- never one whose first try ran (release.lua). Written only when reaping, so never on the
  -- request path.
  reaped = 'rp',
  ticket = 't:',                    -- t:h  hash: the waiting ticket (FIELD below)
  ticket_expiry = 'tx',             -- zset h -> expiry of its ticket (last heartbeat + ticket TTL)
  arrivals = 'seq',                 -- arrival counter; a ticket's member is "%016d:h" so equal
                                    -- scores sort by arrival
  stream = 'q:',                    -- q:k|p|g  zset: one key's tickets for one group, member -> score
  stream_floor = 'fl',              -- hash "k|p|g" -> floor: the stream's head scores at least this
  stream_heads = 'l2:',             -- l2:p|g  heads of the streams of pool p whose key is under its cap
  eligible = 'l3:',                 -- l3:g  the best stream head of every pool under its cap
  borrower_heads = 'b:',            -- b:g  heads of all streams whose head ticket may borrow
  head_index = 'idx',               -- hash: which member each stream/pool currently has in
                                    -- stream_heads, eligible and borrower_heads
  key_streams = 'ks:',              -- ks:k  set: the "p|g" streams key k has queued
  pool_groups = 'pg:',              -- pg:p  set: the groups pool p has queued in
  pool_tickets = 'pe:',             -- pe:p  zset h -> enqueued_at, for the longest wait
  -- Revocable borrowing (above):
  revocable_leases = 'rv:',         -- rv:g  zset h -> granted at: revocable borrowed leases not yet asked
  revocations_pending = 'rvp',      -- hash group -> leases asked back and not yet given back
  -- hash group -> when it last admitted or queued a request within its caps (and not itself
  -- redoable) while revocable leases ran; group|spare, group|spare_at: the spare, and when a chat
  -- that had to wait last raised it (lib/revocable.lua)
  chat_activity = 'act',
  -- Fair share (above):
  fair_share_usage = 'fu',          -- hash association -> "usage|valued_at"; field * holds
                                    -- everyone's, likewise (association names are numbers)
  fair_shares = 'fs',               -- hash association -> normalised share S; field * holds the
                                    -- half-life (s). The latest demand states both.
  association_keys = 'ak:',         -- ak:a  set: keys of association a with queued tickets, whose
                                    -- stream heads are scored again when a's usage changes
  associations_waiting = 'fa',      -- set: associations with queued tickets
  rescored_at = 'fsr',              -- when they were all last scored again (upkeep does it once a
                                    -- second: see rescore_waiting)
  usage_restored = 'fsok',          -- set once the database's copy of the usage has been added back
  -- Budgets and rate limits (lib/limits.lua):
  budget_window = 'bw:',            -- bw:<field>  hash: one budget window's counters (FIELD below)
  rate_limits = 'rl',               -- hash limit name -> its theoretical arrival time (GCRA)
  -- The wait estimate's measures (lib/pace.lua):
  service_seconds = 'svc',          -- hash "p|g" -> mean seconds a lease is held
  service_seconds_by_key = 'svck',  -- hash "k|g" -> mean seconds a lease of that key is held
  arrival_rate = 'arr',             -- hash "k|g" -> "decayed count|at|head start|pool"
  drain_rate = 'drn',               -- hash "k|g" -> "decayed count of grants from the queue|at|since"
}

-- Hash fields, short on the wire like the keys. Lease (l:h) and ticket (t:h) hashes:
local FIELD = {
  member = 'm',                     -- ticket: its member in its stream ("%016d:h")
  key = 'key',                      -- key id
  pool = 'pool',                    -- pool (tier)
  group = 'group',                  -- capacity group
  replica = 'r',                    -- lease: the replica whose slot it holds
  borrowed = 'b',                   -- lease: 1 = granted beyond its key's or pool's cap
  enqueued_at = 'enq',              -- its place in line
  granted_at = 'at',                -- lease: when it was granted
  head_start = 'hs',                -- ticket: its head start (s)
  borrow = 'borrow',                -- ticket: 1 = it may borrow idle slots beyond its caps
  channel = 'chan',                 -- pub/sub channel of its process (a lease: revocable only)
  deadline = 'deadline',            -- ticket: when it leaves the queue
  preference = 'pref',              -- ticket: its replicas in order of preference ("a,b")
  avoid = 'avoid',                  -- ticket: a replica to take only if no other has a slot
  association = 'a',                -- the association charged
  fair_share_weight = 'fw',         -- ticket: its tier's fair-share weight (s)
  estimate = 'est',                 -- the estimate charged (or, queued, to be charged) to the association
  budgets = 'bres',                 -- budgets "field~ttl~limit,..." its estimate is reserved in
  budget_estimate = 'best',         -- lease: the estimate reserved in its budgets
  revocable = 'rv',                 -- 1 = revocable (lease: only when borrowed)
  asked_back = 'asked',             -- lease: a revocable lease asked back
  moved = 'mv',                     -- ticket: 1 = a lease given back to wait again (asked back, or
                                    -- its replica failed it): its grant is not a new one
  -- Budget window (bw:) hashes:
  budget_reserved = 'r',            -- what admitted requests have reserved (their estimate)
  budget_settled = 'u',             -- settled weighted tokens; u<bucket number> in a rolling window
}

-- The call's state. Every entry function sets it afresh through begin: nothing outlives a call.
local NS, NOW, TTL, TICKET_TTL, RESERVE, IDX
local DIRTY      -- groups that may now be able to grant: pump them before returning
local GRANTED    -- handle -> {borrowed, queued_seconds} granted during this call
local QUIET      -- the caller's own handle: it learns of its grant from the reply, not pub/sub
local REPLICAS   -- group -> its replica names, read once per call
local LOADS      -- group -> {names, slots, busy, hold} read once per call, until a lease changes them
local WAITING    -- tickets queued in the namespace (queued_total), read at most once per call
local HALF_LIFE  -- the usage half-life, read once per call
local FACTORS    -- association -> F within this call; cleared by every charge

local function begin(keys, argv)
  NS = keys[1]
  NOW, TTL = tonumber(argv[1]), tonumber(argv[2])
  TICKET_TTL, RESERVE = tonumber(argv[3]), tonumber(argv[4])
  IDX = NS .. KEY.head_index
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
  if WAITING == nil then WAITING = num(redis.call('GET', NS .. KEY.queued_total)) end
  return WAITING > 0
end

local function hincr(hash, field, by)
  local v = redis.call('HINCRBY', NS .. hash, field, by)
  if v <= 0 then redis.call('HDEL', NS .. hash, field) end  -- keep the counters sparse
  return v
end

-- An in-flight counter: its zeros stay (see KEY above).
local function hcount(hash, field, by)
  return redis.call('HINCRBY', NS .. hash, field, by)
end

local function key_open(key)
  return num(redis.call('HGET', NS .. KEY.in_flight_by_key, key))
    < num(redis.call('HGET', NS .. KEY.key_cap, key))
end

local function pool_open(pool)
  local cap = redis.call('HGET', NS .. KEY.pool_cap, pool)
  return (not cap) or num(redis.call('HGET', NS .. KEY.in_flight_by_pool, pool)) < num(cap)
end

