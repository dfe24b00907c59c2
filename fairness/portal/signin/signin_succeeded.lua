-- signin_succeeded.lua: a sign-in succeeded, so its attempt no longer counts against anyone.
-- The username's counter starts again; the address's gives back the one attempt counted for this
-- sign-in (many people may sign in from one shared address: only its failures should add up).
-- A counter that expired meanwhile is left absent, not recreated at -1 without an expiry.
-- KEYS[1]  the address's counter    KEYS[2]  the username's counter (absent: no username)
-- Returns  0
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
if left > 0 then
  redis.call('DECR', KEYS[1])
end
if KEYS[2] then
  redis.call('DEL', KEYS[2])
end
return 0
