-- ARGV[5] name, [6] holder, [7] epoch, [8] successor ('' for none). Returns 1 if released.
local name, holder, epoch, successor = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local now = clock()
local packed = redis.call('HGET', K_LEASE, name)
if not packed then
  return 0
end
local h, e, ttl = unpack_lease(packed)
if h ~= holder or e ~= epoch or expiry_of(name) <= now then
  return 0
end
drop_lease(name, now, ttl)
local extra = {'h', holder, 'e', epoch}
if successor ~= '' then
  local key = handover_key(name)
  redis.call('HSET', key, 'successor', successor, 'until', fmt(now + tonumber(ttl)))
  -- The key TTL only collects a reservation nobody used; acquire checks 'until'.
  redis.call('PEXPIRE', key, fmt(math.floor(tonumber(ttl) / 1000) + 1000))
  extra[5] = 's'
  extra[6] = successor
end
local rev = next_revision()
append(rev, 'released', name, extra)
notify(rev)
return 1
