-- health_verdicts.lua: publish probe verdicts, leaving alone any replica that requests of
-- several callers marked failing: an engine can answer /health while it fails or stalls every
-- request, so only that mark's own cooldown ends it.
-- KEYS[i]  replica i's health verdict (see health.py)
-- ARGV[i]  its verdict, "up" or "down"       ARGV[#KEYS + 1]  the verdicts' TTL (ms)
local ttl = ARGV[#KEYS + 1]
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= 'failing' then
    redis.call('SET', key, ARGV[i], 'PX', ttl)
  end
end
return #KEYS
