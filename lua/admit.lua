-- admit (contract v3): reserve one request on the first candidate whose cooldown, deployment
-- limits and provider limits all fit, atomically across all candidates; or, when the reservation
-- id already holds a live slot on a candidate (an admission repeated after a lost reply), answer
-- that reservation again without counting anything.
--
-- KEYS: [1] the reservation key (llmroute:{ns}:v3:r:<id>, see common.lua); then per account (the
--   tenant's, the key's: see below) its window hash, slots zset, spend hash and day hash
--   (llmroute:{ns}:v3:w:t:<name>, ...:s:t:<name>, ...:b:t:<name>, ...:y:t:<name>); then per
--   candidate in the caller's (cost) order: the deployment's window hash and slots zset
--   (llmroute:{ns}:v3:w:<scope>, ...:s:<scope>) and, when the candidate counts days (see
--   below), its day hash (...:y:<scope>); then the same for the provider when it has
--   provider-wide limits. The deployment's window hash also holds its cooldown.
-- ARGV: [1] now ms or '' (server time), [2] reservation id (opaque string), [3] slot ttl ms (at
--   most one hour), [4] number of candidates n, [5] number of accounts m (0, 1 or 2: the
--   tenant's and the key's own limits and budgets); per account eight values: its scope code
--   (3 tenant, 4 key), rpm, tpm, concurrency, daily and monthly budget in micro-USD, rpd and
--   tpd (its days are UTC days) (0 = unlimited); with accounts, then the request's estimated
--   cost on each candidate (n values), reserved against every account's budgets; then per
--   candidate: the tokens to reserve there, the input part of them (the rest is output) or '-'
--   when the deployment does not count input and output apart (neither it nor its provider
--   limits either: its windows then keep no input or output counters), its number of scopes s
--   (1 or 2; '1d' or '2d' when one of them has a per-day limit: the candidate counts days),
--   then per scope rpm, tpm, itpm, otpm, concurrency (already scaled to the request's
--   priority share) and, when the candidate counts days, rpd, tpd (scaled alike) and the
--   scope's day as the caller's clock sees it: its id, start and end ms (see common.lua's day
--   hash). Every limit is a decimal integer, and exactly '0' means unlimited. Tokens
--   count against tpm, input against itpm, output against otpm.
--   After the candidates: per candidate its line's two keys (llmroute:{ns}:v3:q:<scope> and
--   ...:qx:<scope>, see common.lua), and in ARGV the request's ticket as a line's member (16
--   hex digits: its line ticket, else its reservation id; then 'b' for a batch request's, 'i'
--   otherwise), its class's handicap ms, the ticket's ttl ms, 'j'
--   when a refused request joins the lines it waits for, 'n' when it holds a ticket but does
--   not join, '' without a ticket, and the wake-up channel.
--   Last of all: KEYS ends with the epoch key and ARGV with the epoch the instance knows ('' to
--   skip the check; see heartbeat.lua and restore.lua).
-- Lines (twin: router-core/src/ledger/line.rs): a candidate admits only a request before which
--   no live ticket stands in its line; an admitted ticket leaves every line and wakes whoever
--   is first in the line of the deployment it was admitted on.
-- Slots: see common.lua. Every admission that adds a slot refreshes the zset's TTL. The
--   reservation key is written first (SET NX GET): a first admission finds it absent at no
--   extra call; only a repeated one looks further. A refused admission deletes the key it wrote.
-- Reply: lost    {2, now} when the stored epoch is not the instance's: the store lost its keys
--                 or another instance restored them since; nothing is admitted, the instance
--                 restores (restore.lua) first.
--        granted {1, now, rank (0-based candidate index), bucket, day, month}, and per account
--          two more: the requests and tokens its window counts with this admission
--          (for a repeated admission: the first one's rank and bucket, the day and month of
--          that bucket, and no account counts, as it counted nothing)
--        denied  {0, now, place (how many stand before its ticket in the shortest line it is in
--                 after this admission; -1 when in none), then per candidate: verdict (1 never, 2 not now, 3 budget exhausted
--                 until its period ends), limit (1 cooldown, 2 rpm, 3 tpm, 4 concurrency,
--                 5 daily budget, 6 monthly budget, 7 itpm, 8 otpm, 9 rpd, 10 tpd, 11 others
--                 wait before it in the line (not now, for LINE_POLL_MS); a full
--                 per-day limit is "not now", until its day ends), scope (1 deployment, 2 provider,
--                 3 tenant, 4 key), at ms (when it would fit; 0 for never)}
-- The reply is decoded by `reply::admit` in router-core/src/ledger/redis/reply.rs.
-- Twin: `Engine::admit` in router-core/src/ledger/engine.rs.

local now = now_ms()
if ARGV[#ARGV] ~= '' and redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {2, now}
end
-- Numbers come from ARGV by coercion (see now_ms).
local id, n = ARGV[2], ARGV[4] + 0
-- The candidate being looked at (set by `load`): the tokens to reserve there, their input and
-- output parts, and whether its windows count those apart.
local need, need_in, need_out, apart = 0, 0, 0, false
-- Whether the loaded candidate counts days, and how many KEYS and ARGV each of its scopes takes.
local days, kst, ast = false, 2, 5
-- Worked out once per call: in Redis's Lua, number-to-string conversions, tables and calls
-- cost more than the reads themselves.
local nb = math.floor(now / BUCKET_MS)
local oldest_live = nb - SPAN
local rb, tb = fmt('r%d', nb), fmt('t%d', nb)
-- Input and output counter names of bucket nb, and '(now' for ZCOUNT: formatted when first
-- needed.
local ib, xb, after_now = nil, nil, nil
-- The accounts and the estimated cost on each candidate (nil without accounts: a table made on
-- every call costs every admission).
local accounts, costs = nil, nil
-- Where the first candidate's KEYS and ARGV start.
local k1, a1 = 2, 6
local m = ARGV[5] + 0
if m > 0 then
  accounts, costs = {}, {}
  for j = 1, m do
    local k, a = 4 * j - 2, 8 * j - 2
    -- Its rpm, tpm and concurrency stay strings for `fits`.
    local t = {w = KEYS[k], z = KEYS[k + 1], b = KEYS[k + 2], y = KEYS[k + 3],
      code = ARGV[a] + 0, rpm = ARGV[a + 1], tpm = ARGV[a + 2], conc = ARGV[a + 3],
      daily = ARGV[a + 4] + 0, monthly = ARGV[a + 5] + 0, rpd = ARGV[a + 6] + 0,
      tpd = ARGV[a + 7] + 0}
    t.days = t.rpd > 0 or t.tpd > 0
    accounts[j] = t
  end
  for c = 1, n do
    costs[c] = ARGV[5 + 8 * m + c] + 0
  end
  k1, a1 = 2 + 4 * m, 6 + 8 * m + n
end
-- Budget periods, worked out only for requests with accounts.
local p = accounts and periods(now)

-- The request's place in the lines: its ticket, its rank (its ticket's where it is in a line,
-- else now plus its handicap), and per candidate whether anyone waits in its line.
local la, lk = #ARGV - 5, #KEYS - 2 * n
local ticket, joins = ARGV[la], ARGV[la + 3]
local rank, inside, queued = nil, false, nil
-- Most of the time nobody waits: one EXISTS over the lines answers that for every candidate,
-- and nothing more of the lines is made (every table and function a script makes costs each
-- call).
local any
if n == 1 then
  any = redis.call('EXISTS', KEYS[lk]) > 0
else
  local lines = {}
  for c = 1, n do
    lines[c] = KEYS[lk + 2 * c - 2]
  end
  any = redis.call('EXISTS', unpack(lines)) > 0
end
if any then
  queued = {}
  for c = 1, n do
    local q, qx = KEYS[lk + 2 * c - 2], KEYS[lk + 2 * c - 1]
    if redis.call('ZCARD', q) > 0 then
      line_purge(q, qx, now)
      queued[c] = true
      local r = rank == nil and redis.call('ZSCORE', q, ticket)
      if r then
        rank, inside = r + 0, true
      end
    end
  end
end
rank = rank or now + ARGV[la + 1]

-- Whether others stand before the request in candidate c's line.
local function behind(c)
  return queued ~= nil and queued[c] and line_ahead(KEYS[lk + 2 * c - 2], ticket, rank) > 0
end

-- The request was admitted on candidate c: its ticket leaves every line, and whoever is first
-- in c's line now is woken.
local function leave_lines(c)
  if not inside then
    return
  end
  for j = 1, n do
    redis.call('ZREM', KEYS[lk + 2 * j - 2], ticket)
    redis.call('ZREM', KEYS[lk + 2 * j - 1], ticket)
  end
  line_wake(KEYS[lk + 2 * c - 2], KEYS[lk + 2 * c - 1], now, ARGV[la + 4])
end

-- The reservation key holds the name of the request counter of the bucket the reservation was
-- counted in ('r' and the bucket). Written first, only if absent, and read in the same call.
local prior = redis.call('SET', KEYS[1], rb, 'PX', SLOTS_TTL_MS_ARG, 'NX', 'GET')

-- Loads the candidate whose blocks start at KEYS[k] and ARGV[a] into need, need_in, need_out
-- and apart; returns its number of scopes and where the next candidate's blocks start.
local function load(k, a)
  need = ARGV[a] + 0
  apart = ARGV[a + 1] ~= '-'
  if apart then
    need_in = ARGV[a + 1] + 0
    if need_in > need then
      need_in = need
    end
    need_out = need - need_in
    if ib == nil then
      ib, xb = fmt('i%d', nb), fmt('x%d', nb)
    end
  else
    need_in, need_out = 0, 0
  end
  local sc = ARGV[a + 2]
  if sc == '1' or sc == '2' then
    days, kst, ast = false, 2, 5
  else
    days, kst, ast = true, 3, 10
    sc = string.sub(sc, 1, 1)
  end
  local own = sc + 0
  return own, k + own * kst, a + 3 + own * ast
end

-- Whether one more request of the loaded candidate fits under per-day limits rpd and tpd
-- (numbers, 0 = unlimited) in day `id` (ending at `stop`) of day hash y: what `day_take`
-- needs, or nil. With `reasons`, appends each full one to it, for scope code `code`.
local function day_fits(y, rpd, tpd, id, stop, code, reasons)
  local r, t = day_counted(y, id)
  local ok = true
  if rpd > 0 and r + 1 > rpd then
    ok = false
    if reasons then
      reasons[#reasons + 1] = {kind = 9, s = code, at = stop}
    end
  end
  if tpd > 0 and t + need > tpd then
    ok = false
    if reasons then
      reasons[#reasons + 1] = {kind = 10, s = code, at = stop}
    end
  end
  if ok then
    return {y = y, id = id, stop = stop, r = r, t = t}
  end
  return nil
end

-- day_fits for the loaded candidate's scope whose day block starts at ARGV[ai] (rpd, tpd, and
-- the caller's day: id, start, end); `true` when the scope has no per-day limit.
local function scope_day_fits(y, ai, code, reasons)
  local rpd, tpd = ARGV[ai] + 0, ARGV[ai + 1] + 0
  if rpd == 0 and tpd == 0 then
    return true
  end
  local id, stop = server_day(now, ARGV[ai + 2] + 0, ARGV[ai + 3] + 0, ARGV[ai + 4] + 0)
  return day_fits(y, rpd, tpd, id, stop, code, reasons)
end

-- day_fits for account t (its days are UTC days).
local function account_day_fits(t, reasons)
  return day_fits(t.y, t.rpd, t.tpd, p.day, p.day_end, t.code, reasons)
end

-- Counts one request of the loaded candidate in the day day_fits returned.
local function day_take(d)
  redis.call('HSET', d.y, 'd', fmt('%d', d.id), 'r', fmt('%d', d.r + 1), 't',
    fmt('%d', d.t + need))
  redis.call('PEXPIRE', d.y, math.max(1, d.stop - now) + DAY_MS)
end

-- An admission repeated with an id that holds a live slot on a candidate gets it back.
if prior then
  -- (A bare bucket number is what instances of earlier versions wrote.)
  local b = tonumber(prior) or tonumber(string.sub(prior, 2))
  local k, a = k1, a1
  for c = 1, n do
    local score = redis.call('ZSCORE', KEYS[k + 1], id)
    if b and score and tonumber(score) > now then
      leave_lines(c)
      local hp = accounts and periods(b * BUCKET_MS)
      return {1, now, c - 1, b, hp and hp.day or 0, hp and hp.month or 0}
    end
    local _
    _, k, a = load(k, a)
  end
end

-- Whether an account's budget refuses candidate c (the first account that does): a reply
-- row, or nil. (Defined only with accounts: every function a script defines costs a closure on
-- each call.)
local over_budget = nil
if accounts then
  over_budget = function(c)
    local cost = costs[c]
    for _, t in ipairs(accounts) do
      if t.day_spent == nil then
        t.day_spent, t.month_spent = spent(t.b, p)
      end
      for _, b in ipairs({{t.daily, t.day_spent, p.day_end, 5},
          {t.monthly, t.month_spent, p.month_end, 6}}) do
        if b[1] > 0 and cost > b[1] then
          return {1, b[4], t.code, 0}
        elseif b[1] > 0 and b[2] + cost > b[1] then
          return {3, b[4], t.code, b[3]}
        end
      end
    end
    return nil
  end
end

-- Whether one more request of the loaded candidate fits in a scope now: window hash w, slots
-- zset z, scope code (1 deployment, 2 provider, 3 tenant, 4 key) and limits as passed in ARGV ('0' =
-- unlimited). The common case (no bucket has left the window since the last write) is one
-- HMGET and no write; anything else goes through `expire`. Values are converted only when a
-- limit needs them: a full candidate costs its read and a few conversions. Input and output
-- counters are read only where the candidate counts them apart. Without `reasons` it stops at
-- the first full limit and returns what `take` needs when everything fits (else nil); with
-- `reasons` (a list) it appends every full limit to it.
local function fits(w, z, code, rpm, tpm, itpm, otpm, conc, reasons)
  local v
  if apart then
    v = redis.call('HMGET', w, 'R', 'T', 'o', rb, tb, 'c', 'I', 'X', ib, xb)
  else
    v = redis.call('HMGET', w, 'R', 'T', 'o', rb, tb, 'c')
  end
  local o = v[3]
  o = o and o + 0 or nil
  -- R, T, I, X, cr, ct, ci, cx, cd: stored strings (false when missing) on the common path,
  -- numbers otherwise.
  local R, T, I, X, bk, cr, ct, ci, cx, cd, init
  if o ~= nil and o >= oldest_live and o <= nb then
    R, T, bk, cr, ct, cd, init = v[1], v[2], nb, v[4], v[5], v[6], false
    I, X, ci, cx = v[7], v[8], v[9], v[10]
  else
    local x = expire(w, now, v[7] ~= nil and v or nil)
    R, T, o, bk, cr, ct, cd, init = x.R, x.T, x.o, x.b, x.cr, x.ct, x.cd, x.init or false
    I, X, ci, cx = x.I, x.X, x.ci, x.cx
  end
  cd = (cd or 0) + 0
  local ok = true
  if code == 1 and cd > now then
    if not reasons then
      return nil
    end
    ok = false
    reasons[#reasons + 1] = {kind = 1, s = 1, at = cd}
  end
  R = (R or 0) + 0
  if rpm ~= '0' and R + 1 > rpm + 0 then
    if not reasons then
      return nil
    end
    ok = false
    reasons[#reasons + 1] = {kind = 2, s = code, key = w, o = o, total = R, prefix = 'r',
      need = 1, limit = rpm + 0}
  end
  T = (T or 0) + 0
  if tpm ~= '0' and T + need > tpm + 0 then
    if not reasons then
      return nil
    end
    ok = false
    reasons[#reasons + 1] = {kind = 3, s = code, key = w, o = o, total = T, prefix = 't',
      need = need, limit = tpm + 0}
  end
  if apart then
    I, X = (I or 0) + 0, (X or 0) + 0
    if itpm ~= '0' and I + need_in > itpm + 0 then
      if not reasons then
        return nil
      end
      ok = false
      reasons[#reasons + 1] = {kind = 7, s = code, key = w, o = o, total = I, prefix = 'i',
        need = need_in, limit = itpm + 0, z = z}
    end
    if otpm ~= '0' and X + need_out > otpm + 0 then
      if not reasons then
        return nil
      end
      ok = false
      reasons[#reasons + 1] = {kind = 8, s = code, key = w, o = o, total = X, prefix = 'x',
        need = need_out, limit = otpm + 0, z = z}
    end
  end
  if conc ~= '0' then
    after_now = after_now or fmt('(%d', now)
    if redis.call('ZCOUNT', z, after_now, '+inf') >= conc + 0 then
      if not reasons then
        return nil
      end
      ok = false
      reasons[#reasons + 1] = {kind = 4, s = code, z = z}
    end
  end
  if not ok or reasons then
    return nil
  end
  local st = {w = w, z = z, R = R, T = T, o = o, bk = bk, cd = cd, init = init,
    cr = (cr or 0) + 0, ct = (ct or 0) + 0}
  if apart then
    st.I, st.X, st.ci, st.cx = I, X, (ci or 0) + 0, (cx or 0) + 0
  end
  return st
end

-- Reserves one request of the loaded candidate in scope st (as `fits` returned it), its slot
-- ending at slot_end.
local function take(st, slot_end)
  local b = st.bk
  local rk, tk = rb, tb
  if b ~= nb then
    rk, tk = fmt('r%d', b), fmt('t%d', b)
  end
  local first = st.cr == 0 and st.ct == 0
  if apart then
    local ik, xk = ib, xb
    if b ~= nb then
      ik, xk = fmt('i%d', b), fmt('x%d', b)
    end
    redis.call('HSET', st.w, rk, fmt('%d', st.cr + 1), tk, fmt('%d', st.ct + need),
      ik, fmt('%d', st.ci + need_in), xk, fmt('%d', st.cx + need_out),
      'R', fmt('%d', st.R + 1), 'T', fmt('%d', st.T + need),
      'I', fmt('%d', st.I + need_in), 'X', fmt('%d', st.X + need_out))
    first = first and st.ci == 0 and st.cx == 0
  else
    redis.call('HSET', st.w, rk, fmt('%d', st.cr + 1), tk, fmt('%d', st.ct + need),
      'R', fmt('%d', st.R + 1), 'T', fmt('%d', st.T + need))
  end
  if st.init then
    -- A new window (once per idle spell): store where it starts, and the layout note.
    redis.call('HSET', st.w, 'o', fmt('%d', st.o), 'h', LAYOUT_NOTE)
  end
  if first then
    -- First admission in this bucket: forget long-dead slots; the hash must outlive the bucket.
    forget_slots(st.z, now)
    redis.call('PEXPIRE', st.w, math.max(WINDOW_TTL_MS, st.cd - now))
  end
  -- Every admission refreshes the zset's TTL: a bucket pre-filled by a provider's report has
  -- counters before its first admission, so "first in the bucket" cannot be relied on.
  redis.call('ZADD', st.z, slot_end, id)
  redis.call('PEXPIRE', st.z, SLOTS_TTL_MS_ARG)
end

-- First pass: the first candidate where everything fits takes the request.
do
  local k, a = k1, a1
  for c = 1, n do
    local own, next_k, next_a = load(k, a)
    local held, held2, held_accounts, held_days = nil, nil, nil, nil
    if not behind(c) and not (accounts and over_budget(c)) then
      held = fits(KEYS[k], KEYS[k + 1], 1, ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6],
        ARGV[a + 7])
      if held and own == 2 then
        local k2, a2 = k + kst, a + 3 + ast
        held2 = fits(KEYS[k2], KEYS[k2 + 1], 2, ARGV[a2], ARGV[a2 + 1], ARGV[a2 + 2],
          ARGV[a2 + 3], ARGV[a2 + 4])
        if not held2 then
          held = nil
        end
      end
      if held and days then
        held_days = {}
        for s = 1, own do
          local d = scope_day_fits(KEYS[k + (s - 1) * kst + 2], a + 8 + (s - 1) * ast, s)
          if not d then
            held = nil
            break
          end
          held_days[s] = d
        end
      end
    end
    if held and accounts then
      -- An account's own limits refuse every candidate needing as many tokens or more alike.
      held_accounts = {}
      for j, t in ipairs(accounts) do
        local st = nil
        if not (t.refused_at and need >= t.refused_at) then
          st = fits(t.w, t.z, t.code, t.rpm, t.tpm, '0', '0', t.conc)
          if st and t.days then
            st.day = account_day_fits(t)
            if not st.day then
              st = nil
            end
          end
          if not st then
            t.refused_at = need
          end
        end
        if not st then
          held = nil
          break
        end
        held_accounts[j] = st
      end
    end
    if held then
      local slot_end = fmt('%d', after(now, ARGV[3] + 0))
      if accounts then
        local cost = costs[c]
        for j, t in ipairs(accounts) do
          redis.call('HSET', t.b, 'd', p.day, 'dm', t.day_spent + cost, 'm', p.month,
            'mm', t.month_spent + cost)
          redis.call('PEXPIRE', t.b, math.max(1, p.month_end - now) + DAY_MS)
          take(held_accounts[j], slot_end)
          if held_accounts[j].day then
            day_take(held_accounts[j].day)
          end
        end
      end
      take(held, slot_end)
      if held2 then
        take(held2, slot_end)
      end
      for _, d in ipairs(held_days or {}) do
        if d ~= true then
          day_take(d)
        end
      end
      leave_lines(c)
      local bk = held.bk
      if prior or bk ~= nb then
        -- A repeated id admitted anew, or the clock went back: the key's bucket is not yet
        -- right.
        redis.call('SET', KEYS[1], fmt('r%d', bk), 'PX', SLOTS_TTL_MS_ARG)
      end
      if accounts then
        local out = {1, now, c - 1, bk, p.day, p.month}
        for _, st in ipairs(held_accounts) do
          out[#out + 1] = st.R + 1
          out[#out + 1] = st.T + need
        end
        return out
      end
      return {1, now, c - 1, bk, 0, 0}
    end
    k, a = next_k, next_a
  end
end

-- Every candidate refused. The reservation key written above holds nothing.
if not prior then
  redis.call('DEL', KEYS[1])
end

-- Work out why, and when each candidate could take the request. A limit the request can never
-- fit under comes first, then the budget, then the limit that frees last.

-- The earliest time (ms) at which `need` more fits under `limit` in counter `prefix` of a
-- window whose oldest live bucket is o and whose total is `total`, assuming nothing else is
-- admitted meanwhile.
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


-- The reply row of a refused candidate: the limit that frees last, and when.
local function verdict(reasons)
  local worst = nil
  for _, r in ipairs(reasons) do
    local at = r.at
    if r.kind == 2 or r.kind == 3 or r.kind == 7 or r.kind == 8 then
      at = fits_at(r.key, r.o, r.total, r.prefix, r.need, r.limit)
      -- Input and output are corrected when requests in flight settle: poll while any is.
      after_now = after_now or fmt('(%d', now)
      if (r.kind == 7 or r.kind == 8) and redis.call('ZCOUNT', r.z, after_now, '+inf') > 0 then
        at = math.min(at, now + CONCURRENCY_POLL_MS)
      end
    elseif r.kind == 4 then
      -- Slots are freed when requests settle, which no clock predicts: poll, bounded by the
      -- oldest slot's expiry.
      local first = redis.call('ZRANGEBYSCORE', r.z, after_now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      at = math.min(tonumber(first[2]) or now, now + CONCURRENCY_POLL_MS)
    end
    if worst == nil or at > worst[4] then
      worst = {2, r.kind, r.s, at}
    end
  end
  if worst == nil then
    error('admit.lua: a candidate was refused without a reason')
  end
  return worst
end

local out = {0, now, -1}
local k, a = k1, a1
for c = 1, n do
  local own, next_k, next_a = load(k, a)
  local row = nil
  if behind(c) then
    row = {2, 11, 1, now + LINE_POLL_MS}
  end
  for s = 1, row == nil and own or 0 do
    local as = a + 3 + (s - 1) * ast
    local over = {{ARGV[as + 1] + 0, need, 3}, {ARGV[as + 2] + 0, need_in, 7},
      {ARGV[as + 3] + 0, need_out, 8}}
    if days then
      over[4] = {ARGV[as + 6] + 0, need, 10}
    end
    for _, t in ipairs(over) do
      if row == nil and t[1] > 0 and t[2] > t[1] then
        row = {1, t[3], s, 0}
      end
    end
  end
  for _, t in ipairs(accounts or {}) do
    if row == nil and t.tpm ~= '0' and need > t.tpm + 0 then
      row = {1, 3, t.code, 0}
    end
    if row == nil and t.tpd > 0 and need > t.tpd then
      row = {1, 10, t.code, 0}
    end
  end
  if row == nil and accounts then
    row = over_budget(c)
  end
  if row == nil then
    local reasons = {}
    for s = 1, own do
      local ks, as = k + (s - 1) * kst, a + 3 + (s - 1) * ast
      fits(KEYS[ks], KEYS[ks + 1], s, ARGV[as], ARGV[as + 1], ARGV[as + 2], ARGV[as + 3],
        ARGV[as + 4], reasons)
      if days then
        scope_day_fits(KEYS[ks + 2], as + 5, s, reasons)
      end
    end
    for _, t in ipairs(accounts or {}) do
      fits(t.w, t.z, t.code, t.rpm, t.tpm, '0', '0', t.conc, reasons)
      if t.days then
        account_day_fits(t, reasons)
      end
    end
    row = verdict(reasons)
  end
  for _, x in ipairs(row) do
    out[#out + 1] = x
  end
  k, a = next_k, next_a
end

-- The ticket joins (or keeps its place in) the line of each candidate that refused for its own
-- capacity, and leaves the others' (refused for the request's accounts, size or budget).
if joins ~= '' then
  local expiry = now + ARGV[la + 2]
  for c = 1, n do
    local q, qx = KEYS[lk + 2 * c - 2], KEYS[lk + 2 * c - 1]
    local v, s = out[4 * c], out[4 * c + 2]
    if joins == 'j' and v == 2 and (s == 1 or s == 2) then
      line_join(q, qx, ticket, rank, expiry)
      redis.call('PEXPIRE', q, ARGV[la + 2])
      redis.call('PEXPIRE', qx, ARGV[la + 2])
      local ahead = redis.call('ZRANK', q, ticket)
      if out[3] < 0 or ahead < out[3] then
        out[3] = ahead
      end
    elseif queued and queued[c] then
      redis.call('ZREM', q, ticket)
      redis.call('ZREM', qx, ticket)
    end
  end
end
return out
