-- llmroute ledger: prelude shared by every script (contract v1).
--
-- Time: ARGV[1] is the time in ms since the Unix epoch, or '' to use the server clock (TIME), so
-- instances with skewed clocks agree. Milliseconds fit exactly in Lua's doubles.
--
-- Window hash (one per limited scope, key llmroute:{ns}:v1:w:<scope>), TTL 62 s after each write:
--   R, T      running totals of requests and tokens in the live buckets
--   o         oldest bucket that may hold anything; every stored bucket is in o .. o+60
--   r<k>, t<k> requests and tokens admitted in bucket k = floor(ms / 1000)
-- At bucket nb the live buckets are nb-60 .. nb; the oldest is partly outside the exact 60 s
-- window and is counted in full (the safe side). Bucket k leaves the window at (k+61)*1000 ms.
-- This mirrors router-core/src/ledger/window.rs; the conformance suite checks they agree.

local BUCKET_MS = 1000
local SPAN = 60
local WINDOW_TTL_MS = 62000

local function now_ms()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops the buckets of `key` that have left the window at bucket nb.
-- Returns R, T, o (oldest live bucket) and the bucket new admissions go to.
local function expire(key, nb)
  local v = redis.call('HMGET', key, 'R', 'T', 'o')
  local R, T, o = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3])
  local live = nb - SPAN
  if o == nil then
    return 0, 0, live, nb
  end
  if o >= live then
    return R, T, o, math.max(nb, o)
  end
  if o + SPAN < live then
    redis.call('DEL', key)
    return 0, 0, live, nb
  end
  local fields = {}
  for k = o, live - 1 do
    fields[#fields + 1] = 'r' .. k
    fields[#fields + 1] = 't' .. k
  end
  local vals = redis.call('HMGET', key, unpack(fields))
  for i = 1, #vals, 2 do
    R = R - (tonumber(vals[i]) or 0)
    T = T - (tonumber(vals[i + 1]) or 0)
  end
  redis.call('HDEL', key, unpack(fields))
  redis.call('HSET', key, 'R', R, 'T', T, 'o', live)
  return R, T, live, nb
end

local function is_live(o, k)
  return k >= o and k <= o + SPAN
end

-- Adds n to counter prefix..k and to its total, never taking the bucket below zero.
local function adjust(key, prefix, total, k, n)
  if n == 0 then
    return
  end
  local cur = tonumber(redis.call('HGET', key, prefix .. k)) or 0
  local new = math.max(0, cur + n)
  redis.call('HSET', key, prefix .. k, new)
  redis.call('HINCRBY', key, total, new - cur)
end

-- The earliest time (ms) at which `need` more fits under `limit` in counter `prefix`, given its
-- total, assuming nothing else is admitted meanwhile.
local function fits_at(key, o, total, prefix, need, limit)
  local fields = {}
  for k = o, o + SPAN do
    fields[#fields + 1] = prefix .. k
  end
  local vals = redis.call('HMGET', key, unpack(fields))
  local left = total
  for i = 1, #vals do
    left = left - (tonumber(vals[i]) or 0)
    if left + need <= limit then
      return (o + i - 1 + SPAN + 1) * BUCKET_MS
    end
  end
  return (o + SPAN + SPAN + 1) * BUCKET_MS
end

-- Extends a cooldown key to `untl` (ms); never shortens it.
local function extend_cooldown(key, now, untl)
  local cur = tonumber(redis.call('GET', key) or '0') or 0
  if untl > cur and untl > now then
    redis.call('SET', key, untl, 'PX', math.max(1, untl - now))
    return untl
  end
  return cur
end

