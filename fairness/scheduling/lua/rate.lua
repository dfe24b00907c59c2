-- rate.lua: a request that holds no engine slot (tokenize, detokenize) counted against its key's
-- rate limits alone, by acquire's GCRA: no lease, no ticket, no budget. A tokens-per-minute limit
-- counts it as no tokens, so only the requests-per-minute limits can refuse it.
-- KEYS[1]  namespace;  ARGV[1..4] now, lease ttl, ticket ttl, reserve (see lib/state.lua)
-- ARGV[5]  rate limits, "name~per_minute~tokens,..." (lib/limits.lua)
-- Returns  {1} when it passes (and is counted), or {REPLY.rate_limited, index, seconds}
local refused, wait_or_apply = check_rates(ARGV[5], 0)
if refused then return {REPLY.rate_limited, refused, string.format('%.3f', wait_or_apply)} end
wait_or_apply()
return {1}
