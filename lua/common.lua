-- llmroute ledger: prelude shared by every script (contract v3).
--
-- Constants: BUCKET_MS, SPAN, WINDOW_TTL_MS, CONCURRENCY_POLL_MS, SLOTS_TTL_MS (and
-- SLOTS_TTL_MS_ARG, the same as a string for redis.call), SETTLE_GRACE_MS, TIME_CAP_MS, DAY_MS and
-- LINE_POLL_MS are not defined here: router-core/src/ledger/redis/scripts.rs (`lua_constants`) writes them above this
-- file from their Rust twins, so the two sides cannot drift. Scripts that correct windows get
-- lua/update.lua's helpers after this file.
--
-- Time: ARGV[1] is the time in ms since the Unix epoch, or '' to use the server clock (TIME), so
-- instances with skewed clocks agree. Milliseconds fit exactly in Lua's doubles.
--
-- Window hash (one per limited scope, key llmroute:{ns}:v3:w:<scope>), TTL set to 62 s by the
-- first write into each bucket, so it outlives every live bucket:
--   R, T, I, X running totals of requests, tokens, input tokens and output tokens in the live
--             buckets (I + X = T for admissions; provider reports fill each one apart)
--   o         oldest bucket that may hold anything; every stored bucket is in o .. o+60
--   r<k>, t<k>, i<k>, x<k> requests, tokens, input and output tokens admitted in bucket
--             k = floor(ms / 1000)
--   c         (deployment scopes only) end of the deployment's cooldown, ms; a hash holding a
--             cooldown lives at least until it ends
--   h         LAYOUT_NOTE, written with o: a value longer than Redis's default
--             hash-max-listpack-value (64 bytes) keeps the hash a hash table. A busy window holds
--             about 125 fields, and in a listpack every field read or written scans them all
--             (measured: 4 us instead of 1 us for the admission read).
-- At bucket nb the live buckets are nb-60 .. nb; the oldest is partly outside the exact 60 s
-- window and is counted in full (the safe side). Bucket k leaves the window at (k+61)*1000 ms.
-- Twin: router-core/src/ledger/window.rs (Window) and engine.rs; the conformance suite and the
-- differential test (tests/integration/differential.rs) check they agree.

-- string.format('%d') turns an integer into a string for a fraction of what `..` on a number or
-- a numeric redis.call argument costs (both go through '%.17g'-style float formatting).
local fmt = string.format
local LAYOUT_NOTE = 'llmroute window hash; kept a hash table (this value is over 64 bytes)'

-- Numbers are read from strings by arithmetic coercion (`s + 0`), which in Redis's Lua costs
-- about half of what a call to `tonumber` does.
local function now_ms()
  if ARGV[1] ~= '' then
    return ARGV[1] + 0
  end
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- Slots zset (one per limited scope, llmroute:{ns}:v3:s:<scope>): member = reservation id,
-- score = slot expiry ms. A slot is live (counted against concurrency) while its score > now;
-- an expired slot is remembered for SETTLE_GRACE_MS more, so that a late settle still corrects
-- the counts once (twin: window.rs `Slots`). TTL SLOTS_TTL_MS, refreshed by every admission
-- and renewal: it outlives the longest slot and its grace.
-- Reservation key (llmroute:{ns}:v3:r:<id>, one per reservation): 'r' and the bucket its tokens
-- were reserved in (the name of that bucket's request counter), for an admission repeated with
-- the same id (which answers it only while its slot
-- is live). Same TTL as the slots zset, refreshed by renewal; it goes when its live slot is
-- settled or released.

-- Time `ms` after now, saturated at TIME_CAP_MS (never past what a double holds exactly).
local function after(now, ms)
  return math.min(now + ms, TIME_CAP_MS)
end

-- Forgets the slots of zset `z` that expired SETTLE_GRACE_MS or more before now (at most 1000
-- per call).
local function forget_slots(z, now)
  local dead = redis.call('ZRANGEBYSCORE', z, '-inf', now - SETTLE_GRACE_MS, 'LIMIT', 0, 1000)
  if #dead > 0 then
    redis.call('ZREM', z, unpack(dead))
  end
end

-- Whether instance `id` is live: registered in the instances zset `instances` past now (see
-- heartbeat.lua).
local function is_live_instance(instances, id, now)
  local until_ms = tonumber(redis.call('ZSCORE', instances, id))
  return until_ms ~= nil and until_ms > now
end

-- Rejoin hash (llmroute:{ns}:v3:rejoins): per instance id, 'a:<id>' = when it last said it
-- holds admissions made while the store did not answer it, not yet written back (a heartbeat:
-- heartbeat.lua), 'c:<id>' = when it last said it holds none (a heartbeat, or a restore that
-- wrote everything back: restore.lua), and 's:<id>' = when it last held none before its latest
-- such spell (its outage began after that); 'g' = how long a registration lasts (ms). All times
-- are the store's. An instance back from an outage admits through the store only once every
-- other instance that was registered after its outage began has said it holds none since it
-- last said it did: until then the windows may miss what those admitted on their own. Whether
-- they are registered now does not matter (registrations lapse during a long outage), but one
-- that has not registered again within a registration's length of the instance's last such
-- word is taken to have exited. Returns how many instances `me` waits for.
local function rejoin_waiting(rejoin, instances, me, now)
  local v = redis.call('HMGET', rejoin, 'a:' .. me, 's:' .. me, 'g')
  local away = tonumber(v[1])
  if away == nil then
    return 0
  end
  local since, grace = tonumber(v[2]) or 0, tonumber(v[3]) or 0
  local waiting = 0
  local known = redis.call('ZRANGE', instances, 0, -1, 'WITHSCORES')
  for i = 1, #known, 2 do
    local id, registered_until = known[i], tonumber(known[i + 1])
    if id ~= me and registered_until > since
        and (registered_until > now or now - away < grace) then
      local clean = tonumber(redis.call('HGET', rejoin, 'c:' .. id)) or 0
      if clean < away then
        waiting = waiting + 1
      end
    end
  end
  return waiting
end

-- The empty window state: totals and current-bucket counters at zero.
local function clear(w, live)
  w.o, w.R, w.T, w.I, w.X, w.cr, w.ct, w.ci, w.cx, w.init = live, 0, 0, 0, 0, 0, 0, 0, 0, true
end

-- Reads the window `key` at time now (bucket nb), dropping the buckets that have left it.
-- Returns a table: R, T, I, X (totals), o (oldest live bucket), b (the bucket new admissions go
-- to), cr, ct, ci, cx (counters of bucket b), cd (cooldown end, 0 if none), init (o is not
-- stored yet: the first write must store it), fresh (nothing admitted in b yet). One read, or
-- none when the caller passes its own HMGET of R, T, o, r<nb>, t<nb>, c, I, X, i<nb>, x<nb> (in
-- that order) as v.
local function expire(key, now, v)
  local nb = math.floor(now / BUCKET_MS)
  v = v or redis.call('HMGET', key, 'R', 'T', 'o', 'r' .. nb, 't' .. nb, 'c', 'I', 'X',
    'i' .. nb, 'x' .. nb)
  local w = {R = tonumber(v[1]) or 0, T = tonumber(v[2]) or 0, o = tonumber(v[3]), b = nb,
    cr = tonumber(v[4]) or 0, ct = tonumber(v[5]) or 0, cd = tonumber(v[6]) or 0,
    I = tonumber(v[7]) or 0, X = tonumber(v[8]) or 0, ci = tonumber(v[9]) or 0,
    cx = tonumber(v[10]) or 0}
  local live = nb - SPAN
  if w.o == nil then
    clear(w, live)
  elseif w.o > nb then
    -- The clock went back past the oldest live bucket: admit into that bucket.
    local c = redis.call('HMGET', key, 'r' .. w.o, 't' .. w.o, 'i' .. w.o, 'x' .. w.o)
    w.b, w.cr, w.ct = w.o, tonumber(c[1]) or 0, tonumber(c[2]) or 0
    w.ci, w.cx = tonumber(c[3]) or 0, tonumber(c[4]) or 0
  elseif w.o + SPAN < live then
    -- Idle for over a minute: every bucket has left the window.
    redis.call('DEL', key)
    if w.cd > now then
      redis.call('HSET', key, 'c', w.cd)
      redis.call('PEXPIRE', key, w.cd - now)
    end
    clear(w, live)
  elseif w.o < live then
    local fields = {}
    for k = w.o, live - 1 do
      fields[#fields + 1] = 'r' .. k
      fields[#fields + 1] = 't' .. k
      fields[#fields + 1] = 'i' .. k
      fields[#fields + 1] = 'x' .. k
    end
    local vals = redis.call('HMGET', key, unpack(fields))
    for i = 1, #vals, 4 do
      w.R = w.R - (tonumber(vals[i]) or 0)
      w.T = w.T - (tonumber(vals[i + 1]) or 0)
      w.I = w.I - (tonumber(vals[i + 2]) or 0)
      w.X = w.X - (tonumber(vals[i + 3]) or 0)
    end
    redis.call('HDEL', key, unpack(fields))
    redis.call('HSET', key, 'R', w.R, 'T', w.T, 'I', w.I, 'X', w.X, 'o', live, 'h', LAYOUT_NOTE)
    w.o = live
  end
  w.fresh = w.cr == 0 and w.ct == 0 and w.ci == 0 and w.cx == 0
  return w
end

-- UTC budget periods of `now` (twin: router-core/src/ledger/period.rs): day and month
-- indices, and when they end. Month index = year * 12 + month - 1.

local function days_from_civil(y, m)
  if m <= 2 then
    y = y - 1
  end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m > 2) and (m - 3) or (m + 9)
  local doy = math.floor((153 * mp + 2) / 5)
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

local function periods(now)
  local day = math.floor(now / DAY_MS)
  local z = day + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400 + ((m <= 2) and 1 or 0)
  local ny, nm = y, m + 1
  if m == 12 then
    ny, nm = y + 1, 1
  end
  return {day = day, month = y * 12 + m - 1, day_end = (day + 1) * DAY_MS,
    month_end = days_from_civil(ny, nm) * DAY_MS, month_start = days_from_civil(y, m) * DAY_MS}
end

-- A tenant's spend hash (llmroute:{ns}:v3:b:t:<tenant>: d, dm = day index and micro-USD spent
-- in it; m, mm = the same for the month). Returns what was spent in the periods of p (a stored
-- period that has ended counts as nothing).
local function spent(key, p)
  local v = redis.call('HMGET', key, 'd', 'dm', 'm', 'mm')
  local day = (tonumber(v[1]) == p.day) and (tonumber(v[2]) or 0) or 0
  local month = (tonumber(v[3]) == p.month) and (tonumber(v[4]) or 0) or 0
  return day, month
end

-- Day hash (one per scope or account with a per-day limit, llmroute:{ns}:v3:y:<scope> and
-- ...:y:t:<account>; twin: router-core/src/ledger/day.rs, DayCount): d = the day (its civil
-- date as days since the epoch, in the scope's time zone), r and t = the requests and tokens
-- counted in it. A day that has ended counts as nothing; the next admission overwrites it. The
-- hash lives a day past the end of its day.

-- The day as this server's clock sees it, from the day the caller's clock gave (its id and
-- bounds, ms): moved one day on when the two clocks straddle a boundary. Returns id and end.
local function server_day(now, id, start, stop)
  if now >= stop then
    return id + 1, stop + DAY_MS
  elseif now < start then
    return id - 1, start
  end
  return id, stop
end

-- Requests and tokens day hash y counted in day `id`.
local function day_counted(y, id)
  local v = redis.call('HMGET', y, 'd', 'r', 't')
  if tonumber(v[1]) == id then
    return tonumber(v[2]) or 0, tonumber(v[3]) or 0
  end
  return 0, 0
end

-- Corrects day `id`'s counts in day hash y by dr requests and dt tokens, if it is still the
-- stored day (never below zero).
local function day_adjust(y, id, dr, dt)
  local v = redis.call('HMGET', y, 'd', 'r', 't')
  if tonumber(v[1]) == id then
    redis.call('HSET', y, 'r', fmt('%d', math.max(0, (tonumber(v[2]) or 0) + dr)),
      't', fmt('%d', math.max(0, (tonumber(v[3]) or 0) + dt)))
  end
end

-- Call records (llmroute:{ns}:v3:c:<call id>, one per call of a script whose second run would
-- count its changes again: lease.lua and unlease.lua). The first run stores its reply; a second
-- run of the same call (the client's retry after a reply it never got: redis-rs after a dropped
-- connection, the cluster client after an I/O error) answers with it and changes nothing. A
-- record lives as long as a window hash: by then nothing the first run counted is in a window.
local function replayed(key)
  local stored = redis.call('GET', key)
  if not stored then
    return nil
  end
  local reply = {}
  for v in string.gmatch(stored, '[^,]+') do
    reply[#reply + 1] = v + 0
  end
  return reply
end

-- Stores `reply` as the answer of the call whose record is `key`, and returns it.
local function remembered(key, reply)
  local parts = {}
  for i, v in ipairs(reply) do
    parts[i] = fmt('%d', v)
  end
  redis.call('SET', key, table.concat(parts, ','), 'PX', fmt('%d', WINDOW_TTL_MS))
  return reply
end

-- Lines (twin: router-core/src/ledger/line.rs). A deployment's line is two sorted sets:
-- llmroute:{ns}:v3:q:<scope> (ticket -> rank) and ...:qx:<scope> (ticket -> expiry ms). A
-- ticket is 16 hex digits, so that tickets of equal rank sort as their ids do as numbers, then
-- its class: 'b' for a batch request's, 'i' for an interactive one's.

-- Drops line q's tickets that expired by `now`.
local function line_purge(q, qx, now)
  local dead = redis.call('ZRANGEBYSCORE', qx, '-inf', now)
  if #dead > 0 then
    redis.call('ZREM', q, unpack(dead))
    redis.call('ZREM', qx, unpack(dead))
  end
end

-- How many tickets stand before `ticket` at `rank` in line q: its own place when it is in line,
-- else every ticket of the same rank or less (it arrived after them).
local function line_ahead(q, ticket, rank)
  if redis.call('ZSCORE', q, ticket) then
    return redis.call('ZRANK', q, ticket)
  end
  return redis.call('ZCOUNT', q, '-inf', fmt('%d', rank))
end

-- Puts `ticket` in line q at `rank` (among tickets of the same rank, by id), or keeps its place;
-- its expiry becomes `expiry`.
local function line_join(q, qx, ticket, rank, expiry)
  redis.call('ZADD', q, 'NX', fmt('%d', rank), ticket)
  redis.call('ZADD', qx, fmt('%d', expiry), ticket)
end

-- Publishes the first live ticket of line q on `channel`, if any: its turn may have come.
local function line_wake(q, qx, now, channel)
  if redis.call('ZCARD', q) == 0 then
    return
  end
  line_purge(q, qx, now)
  local head = redis.call('ZRANGE', q, 0, 0)
  if head[1] then
    redis.call('PUBLISH', channel, head[1])
  end
end
