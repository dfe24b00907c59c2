-- health_failure.lua: count a request that failed on a replica (5xx, timeout) against it, and mark
-- it down once enough different callers failed there within the window: one caller's failures,
-- however many, may be that caller's own requests (a body that makes the engine answer 500).
-- KEYS[1]  the replica's recent failures: sorted set, caller -> Redis time (ms) of its latest
-- KEYS[2]  the replica's health verdict (see health.py); this sets it "failing", which probes
--          leave alone until it expires
-- ARGV[1]  the caller whose request failed     ARGV[2] window (ms)
-- ARGV[3]  callers within the window that mark the replica down
-- ARGV[4]  how long that mark lasts (ms)
-- Returns  1 if this failure marked the replica down, else 0
local t = redis.call('TIME')  -- Redis keeps the time: no gateway's clock matters
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZADD', KEYS[1], now, ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[1])  -- after the cooldown, counting starts again from nothing
  redis.call('SET', KEYS[2], 'failing', 'PX', ARGV[4])
  return 1
end
redis.call('PEXPIRE', KEYS[1], window)
return 0
