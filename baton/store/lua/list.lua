-- ARGV[5], [6] a ZRANGEBYLEX range. Returns incarnation, revision, then key, value, version.
local out = {incarnation(), fmt(current_revision())}
for _, key in ipairs(redis.call('ZRANGEBYLEX', K_RECORDS, ARGV[5], ARGV[6])) do
  local cur = redis.call('HMGET', record_key(key), 'value', 'version')
  if cur[1] then
    out[#out + 1] = key
    out[#out + 1] = cur[1]
    out[#out + 1] = cur[2]
  end
end
return out
