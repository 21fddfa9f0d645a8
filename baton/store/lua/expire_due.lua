-- ARGV[5] batch limit. Logs due expiries; returns microseconds to the next expiry ('0': more
-- are due already) or nil when no lease is held.
local limit = tonumber(ARGV[5])
local now = clock()
local scored = redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', fmt(now), 'WITHSCORES', 'LIMIT', 0,
                         limit)
local due, expiries = {}, {}
for j = 1, #scored, 2 do
  due[#due + 1] = scored[j]
  expiries[#expiries + 1] = tonumber(scored[j + 1])
end
local rev = nil
if #due > 0 then
  local states = redis.call('HMGET', K_LEASE, unpack(due))
  for j, name in ipairs(due) do
    if states[j] then
      local h, e, ttl = unpack_lease(states[j])
      rev = next_revision()
      append(rev, 'expired', name, {'h', h, 'e', e})
      drop_lease(name, expiries[j], ttl)
    else
      drop_lease(name, nil, nil)
    end
  end
end
if rev then
  notify(rev)
end
if #due >= limit then
  return '0'
end
local nxt = redis.call('ZRANGE', K_EXPIRY, 0, 0, 'WITHSCORES')
if #nxt == 0 then
  return false
end
return fmt(math.max(tonumber(nxt[2]) - now, 0))
