-- budget_counted.lua: a budget window's settled counters become at least what the usage records
-- hold for them. A field already higher keeps its value: it counts settled work the flush has not
-- yet written. One step, so a request settling meanwhile is never overwritten.
-- KEYS[1]  the window's hash (admission's bw:<field>, scheduling/lua/lib/limits.lua)
-- ARGV[1]  its lifetime in seconds    ARGV[2..]  field, recorded weighted tokens, field, tokens, ...
-- Returns  0
for i = 2, #ARGV, 2 do
  local counted = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > counted then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 0
