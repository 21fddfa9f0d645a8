-- ARGV[5] incarnation, [6] revision to read after, [7] key prefix, [8] limit.
-- Returns {'compacted', reason} or {'ok', highest revision scanned, {id, fields}...}.
local wanted, after, prefix, limit = ARGV[5], tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
if incarnation() ~= wanted then
  return {'compacted', 'it is from another store, or this one lost its data'}
end
local head = current_revision()
if after > head then
  -- Only a store that lost recent writes (a failover to a lagging replica) can be behind a
  -- position it handed out; the revisions it gives next would not be the ones seen.
  return {'compacted', 'it is ahead of the store, which lost recent writes'}
end
if after == head then
  return {'ok', fmt(after)}
end
local function revision_of(id)
  return tonumber(string.match(id, '^(%d+)-'))
end
-- Every revision has exactly one entry, so the log is complete after `after` exactly when its
-- oldest entry is at most after + 1 (trimming only removes the oldest entries).
local first = redis.call('XRANGE', K_LOG, '-', '+', 'COUNT', 1)
if #first == 0 or revision_of(first[1][1]) > after + 1 then
  return {'compacted', 'the change log was trimmed'}
end
local entries = redis.call('XRANGE', K_LOG, fmt(after + 1), '+', 'COUNT', limit)
local out = {'ok', fmt(after)}
for _, e in ipairs(entries) do
  out[2] = fmt(revision_of(e[1]))
  -- fields are k, kind, n, key, ...: the key is the fourth
  if string.sub(e[2][4], 1, #prefix) == prefix then
    out[#out + 1] = e
  end
end
return out
