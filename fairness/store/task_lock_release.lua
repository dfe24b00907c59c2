-- task_lock_release.lua: a periodic task's run gives its lock back (store/task_locks.py), and only
-- its own: a run that outlived the lock's lifetime finds another run's token there and leaves it.
-- KEYS[1]  the task's lock (keyspace.task_lock)
-- ARGV[1]  the token this run set    ARGV[2]  milliseconds the lock is still to be kept (0: none)
-- Returns  1 when the lock was this run's (deleted, or kept for ARGV[2] ms), else 0
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
else
  redis.call('DEL', KEYS[1])
end
return 1
