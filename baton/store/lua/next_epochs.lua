-- ARGV[5] "name\nfloor\nname\nfloor..." (framed as for renew). Returns the new epoch of each
-- counter, in the order given. Like a renewal, not a change.
local K_COUNTERS = KEYS[9]
local now = clock()
local out, n = {}, 0
for name, floor in string.gmatch(ARGV[5], '([^\n]+)\n([^\n]+)') do
  local last = tonumber(redis.call('HGET', K_COUNTERS, name) or '0')
  local epoch = fmt(math.max(now, last + 1, tonumber(floor)))
  redis.call('HSET', K_COUNTERS, name, epoch)
  n = n + 1
  out[n] = epoch
end
return out
