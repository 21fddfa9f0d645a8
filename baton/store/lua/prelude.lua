local K_INCARNATION, K_REVISION, K_LOG, K_RECORDS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_LEASE, K_LEASE_NAMES, K_EXPIRY, K_EPOCHS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local PREFIX, CHANNEL, CANDIDATE, LOG_LIMIT = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local K_LAPSED = KEYS[10]

-- How many names one command takes at most: unpack() is bounded by the Lua stack.
local CHUNK = 1000

local function fmt(n)
  return string.format('%.0f', n)
end

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function record_key(key)
  return PREFIX .. 'r:' .. key
end

local function handover_key(name)
  return PREFIX .. 'handover:' .. name
end

-- A held lease is "<holder>\n<epoch>\n<ttl>" in the lease hash (names and holders are
-- printable, so never contain a newline). Epoch and ttl stay strings: epochs are compared as
-- the exact text the client sends.
local function pack_lease(holder, epoch, ttl)
  return holder .. '\n' .. epoch .. '\n' .. ttl
end

local function unpack_lease(packed)
  return string.match(packed, '^([^\n]*)\n([^\n]*)\n([^\n]*)$')
end

-- A lease's expiry is its score in the expiry index, the one place it is kept (so a renewal
-- writes only the index); 0 when it is not there.
local function expiry_of(name)
  return tonumber(redis.call('ZSCORE', K_EXPIRY, name) or '0')
end

-- Let go of a lease that stopped being held at ``at`` (microseconds; nil: not a lease that
-- was held), remembering when and its ttl.
local function drop_lease(name, at, ttl)
  redis.call('HDEL', K_LEASE, name)
  redis.call('ZREM', K_EXPIRY, name)
  redis.call('ZREM', K_LEASE_NAMES, name)
  if at then
    redis.call('HSET', K_LAPSED, name, fmt(at) .. '\n' .. ttl)
  end
end

-- The incarnation names this data set. If the key is gone, so is everything else (restart
-- without persistence, FLUSHALL): a new random one makes every older position invalid.
local function incarnation()
  local inc = redis.call('GET', K_INCARNATION)
  if not inc then
    inc = CANDIDATE
    redis.call('SET', K_INCARNATION, inc)
  end
  return inc
end

local function current_revision()
  return tonumber(redis.call('GET', K_REVISION) or '0')
end

local function next_revision()
  incarnation()
  return redis.call('INCR', K_REVISION)
end

-- Append one change. Its stream entry id is <revision>-0: one entry per revision.
local function append(rev, kind, key, extra)
  redis.call('XADD', K_LOG, 'MAXLEN', '~', LOG_LIMIT, fmt(rev) .. '-0',
             'k', kind, 'n', key, unpack(extra))
end

local function notify(rev)
  redis.call('PUBLISH', CHANNEL, fmt(rev))
end
