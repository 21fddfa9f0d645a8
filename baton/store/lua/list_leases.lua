-- ARGV[5], [6] a ZRANGEBYLEX range. Returns name, holder, epoch, ttl, exp per held lease.
local now = clock()
local names = redis.call('ZRANGEBYLEX', K_LEASE_NAMES, ARGV[5], ARGV[6])
local out = {}
for first = 1, #names, CHUNK do
  local last = math.min(first + CHUNK - 1, #names)
  local states = redis.call('HMGET', K_LEASE, unpack(names, first, last))
  local exps = redis.call('ZMSCORE', K_EXPIRY, unpack(names, first, last))
  for j = first, last do
    local packed, exp = states[j - first + 1], exps[j - first + 1]
    if packed and exp and tonumber(exp) > now then
      local h, e, ttl = unpack_lease(packed)
      out[#out + 1] = names[j]
      out[#out + 1] = h
      out[#out + 1] = e
      out[#out + 1] = ttl
      out[#out + 1] = fmt(tonumber(exp))
    end
  end
end
return out
