-- ARGV[5] name, [6] holder, [7] ttl in microseconds. Returns {epoch, expiry} or nil.
local name, holder, ttl = ARGV[5], ARGV[6], tonumber(ARGV[7])
local now = clock()
local packed = redis.call('HGET', K_LEASE, name)
if packed then
  if expiry_of(name) > now then
    return false
  end
  -- Expired by the store clock but not logged yet: log it first, so the feed reads "expired"
  -- before "acquired".
  local old_holder, old_epoch = unpack_lease(packed)
  local rev = next_revision()
  append(rev, 'expired', name, {'h', old_holder, 'e', old_epoch})
  notify(rev)
else
  local reserved = redis.call('HMGET', handover_key(name), 'successor', 'until')
  if reserved[1] and reserved[1] ~= holder and tonumber(reserved[2]) > now then
    return false
  end
end
redis.call('DEL', handover_key(name))
redis.call('HDEL', K_LAPSED, name)
local last = tonumber(redis.call('HGET', K_EPOCHS, name) or '0')
local epoch = fmt(math.max(now, last + 1))
local exp = fmt(now + ttl)
redis.call('HSET', K_EPOCHS, name, epoch)
redis.call('HSET', K_LEASE, name, pack_lease(holder, epoch, fmt(ttl)))
redis.call('ZADD', K_EXPIRY, exp, name)
redis.call('ZADD', K_LEASE_NAMES, 0, name)
local rev = next_revision()
append(rev, 'acquired', name, {'h', holder, 'e', epoch})
notify(rev)
return {epoch, exp}
