-- ARGV[5] number of conditions, then 4 arguments per condition ('v', key, version, '' or
-- 'l', name, holder, epoch), then 3 per op ('p', key, value or 'd', key, '').
-- Returns {1, last revision} or {0, index of each failed condition...}.
local ncond = tonumber(ARGV[5])
local i = 6
local now = nil
local failed = {0}
for c = 0, ncond - 1 do
  local kind, a, b, d = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local ok
  if kind == 'v' then
    ok = (redis.call('HGET', record_key(a), 'version') or '0') == b
  else
    now = now or clock()
    local packed = redis.call('HGET', K_LEASE, a)
    if packed then
      local h, e = unpack_lease(packed)
      ok = h == b and e == d and expiry_of(a) > now
    end
  end
  if not ok then
    failed[#failed + 1] = c
  end
end
if #failed > 1 then
  return failed
end
-- Every change gets its own revision (so every feed position names exactly one change); the
-- result is the last one. Deleting an absent key is not a change and takes none.
local rev = nil
while i <= #ARGV do
  local kind, key, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  local rkey = record_key(key)
  if kind == 'p' then
    rev = next_revision()
    redis.call('HSET', rkey, 'value', value, 'version', fmt(rev))
    redis.call('ZADD', K_RECORDS, 0, key)
    append(rev, 'put', key, {'v', value, 'ver', fmt(rev)})
  elseif redis.call('EXISTS', rkey) == 1 then
    rev = next_revision()
    redis.call('DEL', rkey)
    redis.call('ZREM', K_RECORDS, key)
    append(rev, 'delete', key, {'ver', fmt(rev)})
  end
end
if rev then
  notify(rev)
  return {1, fmt(rev)}
end
return {1, fmt(current_revision())}
