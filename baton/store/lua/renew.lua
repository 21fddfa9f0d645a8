-- ARGV[5] holder, [6] "name\nepoch\nttl\nname\nepoch\nttl..." (one framed argument is far
-- cheaper to send and unpack than three per lease). Each lease held by the holder at that epoch
-- is renewed for the ttl given, which becomes its ttl. Returns {now, the 1-based positions of
-- the leases not renewed, comma-separated}: a few bytes back however many leases were renewed.
-- Renewal is not a change: nothing is logged or published.
local holder = ARGV[5]
local now = clock()
local call, tonumber = redis.call, tonumber
local names, epochs, ttls, wanted, n = {}, {}, {}, {}, 0
for name, epoch, ttl in string.gmatch(ARGV[6], '([^\n]+)\n([^\n]+)\n([^\n]+)') do
  n = n + 1
  names[n], epochs[n], ttls[n] = name, epoch, ttl
  wanted[n] = pack_lease(holder, epoch, ttl)
end
local lost = {}
local expiry_for_ttl = {}
-- Per chunk of names: one HMGET, one ZMSCORE and one ZADD, not a command per lease.
for first = 1, n, CHUNK do
  local last = math.min(first + CHUNK - 1, n)
  local states = call('HMGET', K_LEASE, unpack(names, first, last))
  local exps = call('ZMSCORE', K_EXPIRY, unpack(names, first, last))
  local scores, restated = {}, {}
  for j = first, last do
    local packed, exp = states[j - first + 1], exps[j - first + 1]
    local renew = false
    if packed and exp and tonumber(exp) > now then
      if packed == wanted[j] then
        renew = true
      else
        -- Same holder and epoch with another ttl (or not ours): the given ttl becomes the
        -- lease's ttl.
        local h, e = unpack_lease(packed)
        if h == holder and e == epochs[j] then
          renew = true
          restated[#restated + 1] = names[j]
          restated[#restated + 1] = wanted[j]
        end
      end
    end
    if renew then
      local ttl = ttls[j]
      local at = expiry_for_ttl[ttl]
      if not at then
        at = fmt(now + tonumber(ttl))
        expiry_for_ttl[ttl] = at
      end
      scores[#scores + 1] = at
      scores[#scores + 1] = names[j]
    else
      lost[#lost + 1] = j
    end
  end
  if #scores > 0 then
    call('ZADD', K_EXPIRY, 'XX', unpack(scores))
  end
  if #restated > 0 then
    call('HSET', K_LEASE, unpack(restated))
  end
end
return {fmt(now), table.concat(lost, ',')}
