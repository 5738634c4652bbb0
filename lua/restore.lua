-- restore (contract v3): what an instance did while it could not reach the store, written into
-- the shared windows before it admits through them again; and, when the store lost its keys
-- (a restarted Redis without persistence), what this instance had admitted and spent before.
--
-- KEYS: [1] the epoch key (see heartbeat.lua), [2] this instance's restore mark
--   (llmroute:{ns}:v3:q:<instance>: the last restore applied), [3] the set of instances that
--   wrote their own back into this epoch (llmroute:{ns}:v3:restored), [4] the rejoin hash and
--   [5] the instances zset (see common.lua and heartbeat.lua), then every window hash,
--   slots zset and spend hash the ARGV below refer to, by their KEYS index.
-- ARGV: [1] now ms or '', [2] the epoch this instance last saw (0: none), [3] the epoch to store
--   if there is none, [4] this restore's sequence number (increasing per instance; a restore
--   whose reply was lost is sent again with the same number and applied once), [5] this
--   instance's id, [6] 1 when this restore, with those applied before it, writes back all this
--   instance admitted while the store was away and it admits nothing more on its own (the rejoin
--   hash records that it holds none now), else 0, then six
--   blocks, each a count followed by that many records:
--   spend carry (applied only by the restore that stores a new epoch, i.e. the first after the
--     keys were lost): spend key, day, spent that day, month, spent that month (the tenants'
--     spends as this instance last saw them);
--   day carry (same condition): day hash key, day, requests, tokens (the days of the per-day
--     limits as this instance last saw them; a day hash ends up holding at least that);
--   own windows (applied when the stored epoch is not the one this instance saw, i.e. the keys
--     were lost since it last looked): window key, bucket, R, T, I, X: what this instance
--     admitted through the store in each bucket of the last minute (every instance writes its
--     own, so together they rebuild the windows);
--   own spend (same condition): spend key, day, spent that day, month, spent that month, by
--     this instance since its last heartbeat read the spends;
--   slots (same condition: its reservations in flight, whose slots went with the keys): slots
--     key, reservation id, slot expiry ms;
--   admissions made while the store was away: w (number of windows), then w pairs of window
--     key and slots key, then bucket, requests, tokens, input tokens, output tokens, reservation
--     id, slot expiry ms (0: already settled, no slot), the number of accounts charged a (0, 1
--     or 2: the tenant's, the key's), then a spend keys, cost (micro-USD), day, month.
-- Counts go to their bucket if it is still in the window, to the current bucket if it is ahead
--   of it (clock skew), nowhere if it left the window.
-- Reply: {epoch now stored, 1 if this restore stored it (the keys had been lost) else 0,
--   1 if applied now, 0 if this sequence number had been applied already, how many instances
--   have written their own back into this epoch, 1 if this one just did (its epoch was stale),
--   how many other instances this one waits for (see the rejoin hash)}.
--   Until the instances that shared the store before have all written theirs back, the windows
--   miss some of the last minute: the caller admits nothing meanwhile (bounded).

local now = now_ms()
local mine, proposed, seq = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local stored = tonumber(redis.call('GET', KEYS[1]))
local done = tonumber(redis.call('GET', KEYS[2]))
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[4], 'c:' .. ARGV[5], fmt('%d', now))
end
local waiting = rejoin_waiting(KEYS[4], KEYS[5], ARGV[5], now)
if done and done >= seq then
  return {stored or 0, 0, 0, redis.call('SCARD', KEYS[3]), 0, waiting}
end
redis.call('SET', KEYS[2], fmt('%d', seq), 'PX', EPOCH_TTL_MS)
local lost = stored == nil
if lost then
  stored = proposed
  redis.call('SET', KEYS[1], fmt('%d', stored), 'PX', EPOCH_TTL_MS)
  redis.call('DEL', KEYS[3])
end
local nb = math.floor(now / BUCKET_MS)
local p = periods(now)

-- Adds counts to bucket k of window `key` (see the header for where they go).
local function add(key, k, dr, dt, di, dx)
  local w = expire(key, now)
  if k < w.o then
    return
  end
  if k > w.b then
    k = w.b
  end
  adjust(key, w, k, dr, dt, di, dx, now)
end

-- Adds day_micros to what was spent in `day` and month_micros to what was spent in `month`,
-- each only if it is the current period.
local function add_spend(key, day, day_micros, month, month_micros)
  local v = redis.call('HMGET', key, 'd', 'dm', 'm', 'mm')
  if day == p.day then
    local before = (tonumber(v[1]) == day) and (tonumber(v[2]) or 0) or 0
    redis.call('HSET', key, 'd', fmt('%d', day), 'dm', fmt('%d', before + day_micros))
  end
  if month == p.month then
    local before = (tonumber(v[3]) == month) and (tonumber(v[4]) or 0) or 0
    redis.call('HSET', key, 'm', fmt('%d', month), 'mm', fmt('%d', before + month_micros))
  end
  redis.call('PEXPIRE', key, math.max(1, p.month_end - now) + DAY_MS)
end

local function slot(z, id, expiry)
  if expiry > now then
    redis.call('ZADD', z, fmt('%d', expiry), id)
    redis.call('PEXPIRE', z, SLOTS_TTL_MS)
  end
end

local stale = stored ~= mine
if stale then
  redis.call('SADD', KEYS[3], ARGV[5])
  redis.call('PEXPIRE', KEYS[3], EPOCH_TTL_MS)
end
-- A block of spends, applied only when `apply`; returns the ARGV index after it.
local function spends(a, apply)
  local count = tonumber(ARGV[a])
  for _ = 1, count do
    if apply then
      add_spend(KEYS[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
        tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]))
    end
    a = a + 5
  end
  return a + 1
end

local a = spends(7, lost)
local count = tonumber(ARGV[a])
for _ = 1, count do
  local key, day = KEYS[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2])
  -- A later day already there (the clock moved on) is left as it is.
  if lost and (tonumber(redis.call('HGET', key, 'd')) or day) <= day then
    local r, t = day_counted(key, day)
    redis.call('HSET', key, 'd', fmt('%d', day), 'r', fmt('%d', math.max(r, tonumber(ARGV[a + 3]))),
      't', fmt('%d', math.max(t, tonumber(ARGV[a + 4]))))
    redis.call('PEXPIRE', key, 2 * DAY_MS)
  end
  a = a + 4
end
a = a + 1
count = tonumber(ARGV[a])
for _ = 1, count do
  if stale then
    add(KEYS[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
      tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]))
  end
  a = a + 6
end
a = spends(a + 1, stale)
count = tonumber(ARGV[a])
for _ = 1, count do
  if stale then
    slot(KEYS[tonumber(ARGV[a + 1])], ARGV[a + 2], tonumber(ARGV[a + 3]))
  end
  a = a + 3
end
a = a + 1
count = tonumber(ARGV[a])
for _ = 1, count do
  local w = tonumber(ARGV[a + 1])
  local f = a + 2 + 2 * w
  local bucket, dr, dt = tonumber(ARGV[f]), tonumber(ARGV[f + 1]), tonumber(ARGV[f + 2])
  local di, dx, id, expiry = tonumber(ARGV[f + 3]), tonumber(ARGV[f + 4]), ARGV[f + 5],
    tonumber(ARGV[f + 6])
  for i = 1, w do
    add(KEYS[tonumber(ARGV[a + 2 * i])], bucket, dr, dt, di, dx)
    slot(KEYS[tonumber(ARGV[a + 2 * i + 1])], id, expiry)
  end
  local accounts = tonumber(ARGV[f + 7])
  local cost, day, month = tonumber(ARGV[f + 8 + accounts]), tonumber(ARGV[f + 9 + accounts]),
    tonumber(ARGV[f + 10 + accounts])
  for i = 1, accounts do
    add_spend(KEYS[tonumber(ARGV[f + 7 + i])], day, cost, month, cost)
  end
  a = f + 10 + accounts
end
return {stored, lost and 1 or 0, 1, redis.call('SCARD', KEYS[3]), stale and 1 or 0, waiting}
