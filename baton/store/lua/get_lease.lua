-- ARGV[5] name. Returns {holder, epoch, ttl, exp} or nil.
local name = ARGV[5]
local packed = redis.call('HGET', K_LEASE, name)
local exp = expiry_of(name)
if not packed or exp <= clock() then
  return false
end
local h, e, ttl = unpack_lease(packed)
return {h, e, ttl, fmt(exp)}
