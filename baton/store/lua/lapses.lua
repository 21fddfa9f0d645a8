-- ARGV[5] "name\nname..." Returns name, when it stopped being held, ttl per named lease that
-- is not held now and has a lapse kept (an expiry not logged yet counts as one).
local now = clock()
local out = {}
for name in string.gmatch(ARGV[5], '([^\n]+)') do
  local packed = redis.call('HGET', K_LEASE, name)
  local exp = expiry_of(name)
  local at, ttl = nil, nil
  if packed then
    if exp <= now then
      local _, _, t = unpack_lease(packed)
      at, ttl = fmt(exp), t
    end
  else
    local kept = redis.call('HGET', K_LAPSED, name)
    if kept then
      at, ttl = string.match(kept, '^([^\n]*)\n([^\n]*)$')
    end
  end
  if at then
    out[#out + 1] = name
    out[#out + 1] = at
    out[#out + 1] = ttl
  end
end
return out
