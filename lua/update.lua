-- llmroute ledger: helpers of the scripts that correct windows, follow provider reports or
-- move cooldowns and spend (contract v3). Appended after common.lua to those scripts only:
-- every function a script defines is created anew on each call (a closure costs about 1k
-- instructions inside Redis), so admit.lua, on every request's path, carries none of these.

local function is_live(w, k)
  return k >= w.o and k <= w.o + SPAN
end

-- Makes window `w` (read by expire) outlive every live bucket and any cooldown it holds.
local function keep_window(key, w, now)
  redis.call('PEXPIRE', key, math.max(WINDOW_TTL_MS, w.cd - now))
end

-- Adds dr requests, dt tokens, di input and dx output tokens to bucket k (live) of window `key`
-- as read by `expire` (w) at now, never taking a counter below zero. The current bucket's
-- counters come with w; an older one costs a read. Integers are written through fmt('%d').
-- With no input or output to add (di and dx 0, as for a deployment that does not count them
-- apart), those counters are left alone. A window new since it emptied stores where it starts
-- (else the next read would drop its totals and keep the bucket); and the hash is kept at
-- least a window from now: a bucket later than any admitted in (a leased request moved to its
-- own second) must not expire with the hash's earlier buckets.
local function adjust(key, w, k, dr, dt, di, dx, now)
  local split = di ~= 0 or dx ~= 0
  local rk, tk = fmt('r%d', k), fmt('t%d', k)
  local r, t = w.cr, w.ct
  if k ~= w.b then
    local v = redis.call('HMGET', key, rk, tk)
    r, t = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  end
  local nr, nt = math.max(0, r + dr), math.max(0, t + dt)
  if not split then
    redis.call('HSET', key, rk, fmt('%d', nr), tk, fmt('%d', nt),
      'R', fmt('%d', w.R + nr - r), 'T', fmt('%d', w.T + nt - t))
  else
    local ik, xk = fmt('i%d', k), fmt('x%d', k)
    local i, x = w.ci, w.cx
    if k ~= w.b then
      local v = redis.call('HMGET', key, ik, xk)
      i, x = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    end
    local ni, nx = math.max(0, i + di), math.max(0, x + dx)
    redis.call('HSET', key, rk, fmt('%d', nr), tk, fmt('%d', nt), ik, fmt('%d', ni),
      xk, fmt('%d', nx), 'R', fmt('%d', w.R + nr - r), 'T', fmt('%d', w.T + nt - t),
      'I', fmt('%d', w.I + ni - i), 'X', fmt('%d', w.X + nx - x))
  end
  if w.init then
    redis.call('HSET', key, 'o', fmt('%d', w.o), 'h', LAYOUT_NOTE)
    w.init = false
  end
  keep_window(key, w, now)
end

-- Applies an instance's correction of bucket k to window `key` (as `adjust`, w read by `expire`
-- at now): nothing if k has left the window. A request a block admitted just as a second
-- turned counts in the later second (its instance knows this clock only to within the block
-- call's round trip); if this clock has not reached that second yet, the request was admitted
-- no later than now, so an addition there goes to the current bucket.
local function correct(key, w, k, dr, dt, di, dx, now)
  if k > w.b and dr >= 0 and dt >= 0 and di >= 0 and dx >= 0 then
    k = w.b
  end
  if is_live(w, k) then
    adjust(key, w, k, dr, dt, di, dx, now)
  end
end

-- Extends the cooldown held in deployment window `key` (whose current end is cur) to `untl` ms;
-- never shortens it. The hash then lives at least until the cooldown ends.
local function extend_cooldown(key, now, cur, untl)
  if untl <= cur or untl <= now then
    return cur
  end
  redis.call('HSET', key, 'c', untl)
  if redis.call('PTTL', key) < untl - now then
    redis.call('PEXPIRE', key, untl - now)
  end
  return untl
end
-- Adds `micros` (may be negative: a correction) to what was spent in `day` and `month`, if those
-- are still the stored periods; the hash lives until its month has ended.
local function spend(key, day, month, micros, now, month_end)
  local v = redis.call('HMGET', key, 'd', 'dm', 'm', 'mm')
  if tonumber(v[1]) == day then
    redis.call('HSET', key, 'dm', math.max(0, (tonumber(v[2]) or 0) + micros))
  end
  if tonumber(v[3]) == month then
    redis.call('HSET', key, 'mm', math.max(0, (tonumber(v[4]) or 0) + micros))
  end
  redis.call('PEXPIRE', key, math.max(1, month_end - now) + DAY_MS)
end

-- Follows a provider's report on a deployment's window hash `key` (see observe.lua): ARGV[a ..
-- a + 3] are its rpm, tpm, itpm and otpm limits (0 = unlimited), then remaining (-1 = not
-- reported) and reset ms from now of requests, tokens, input tokens and output tokens.
local function observe_at(key, now, a)
  local nb = math.floor(now / BUCKET_MS)
  local w = expire(key, now)
  -- Remember what the provider said (qr, qt, qi, qx: remaining requests, tokens, input and
  -- output tokens, -1 when not reported; qa: when), for `llmroute quota`.
  if tonumber(ARGV[a + 4]) >= 0 or tonumber(ARGV[a + 6]) >= 0 or tonumber(ARGV[a + 8]) >= 0
      or tonumber(ARGV[a + 10]) >= 0 then
    redis.call('HSET', key, 'qr', ARGV[a + 4], 'qt', ARGV[a + 6], 'qi', ARGV[a + 8],
      'qx', ARGV[a + 10], 'qa', now)
    keep_window(key, w, now)
  end
  local function follow(remaining, reset_ms, limit, used, prefix, total)
    if remaining < 0 then
      return
    end
    local reset_at = after(now, reset_ms)
    if limit <= 0 then
      -- A dimension we do not limit: only "nothing left" is actionable.
      if remaining == 0 then
        w.cd = extend_cooldown(key, now, w.cd, reset_at)
      end
      return
    end
    -- Less left than we believe (nothing left included): count the difference as used until the
    -- provider's reset. A deployment we filled ourselves is left as it is.
    local believed = math.max(0, limit - used)
    if remaining >= believed then
      return
    end
    local k = math.ceil(reset_at / BUCKET_MS) - (SPAN + 1)
    k = math.min(math.max(k, nb - SPAN), nb)
    if not is_live(w, k) then
      k = w.b
    end
    redis.call('HINCRBY', key, prefix .. k, believed - remaining)
    redis.call('HINCRBY', key, total, believed - remaining)
    redis.call('HSET', key, 'o', w.o, 'h', LAYOUT_NOTE)
    keep_window(key, w, now)
  end
  follow(tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a]), w.R, 'r', 'R')
  follow(tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]), tonumber(ARGV[a + 1]), w.T, 't', 'T')
  follow(tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9]), tonumber(ARGV[a + 2]), w.I, 'i', 'I')
  follow(tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11]), tonumber(ARGV[a + 3]), w.X, 'x', 'X')
end
