-- admit (contract v3): reserve one request on the first candidate whose cooldown, deployment
-- limits and provider limits all fit, atomically across all candidates; or, when the reservation
-- id already holds a live slot on a candidate (an admission repeated after a lost reply), answer
-- that reservation again without counting anything.
--
-- KEYS: [1] the reservation key (llmroute:{ns}:v3:r:<id>, see common.lua); with a tenant, then
--   its window hash, slots zset and spend hash (llmroute:{ns}:v3:w:t:<name>, ...:s:t:<name>,
--   ...:b:t:<name>); then per candidate in the caller's (cost) order: the deployment's window
--   hash and slots zset (llmroute:{ns}:v3:w:<scope>, ...:s:<scope>), then, when its provider has
--   provider-wide limits, the provider's window hash and slots zset. The deployment's window
--   hash also holds its cooldown.
-- ARGV: [1] now ms or '' (server time), [2] reservation id (opaque string), [3] slot ttl ms (at
--   most one hour), [4] number of candidates n, [5] 1 with a tenant, else 0; with a tenant:
--   [6..8] its rpm, tpm, concurrency, [9..10] its daily and monthly budget in micro-USD
--   (0 = unlimited), then the request's estimated cost on each candidate (n values); then per
--   candidate: the tokens to reserve there, the input part of them (the rest is output), its
--   number of scopes s (1 or 2), then per scope rpm, tpm, itpm, otpm, concurrency (already
--   scaled to the request's priority share). Every limit is a decimal integer, and exactly '0'
--   means unlimited. Tokens count against tpm, input against itpm, output against otpm.
--   Last of all, after the candidates: KEYS ends with the epoch key and ARGV with the epoch
--   the instance knows ('' to skip the check; see heartbeat.lua and restore.lua).
-- Slots: see common.lua. Every admission that adds a slot refreshes the zset's TTL. A first
--   admission costs one GET of the reservation key (absent); only a repeated one looks further.
-- Reply: lost    {2, now} when the stored epoch is not the instance's: the store lost its keys
--                 or another instance restored them since; nothing is admitted, the instance
--                 restores (restore.lua) first.
--        granted {1, now, rank (0-based candidate index), bucket, day, month} (for a repeated
--          admission: the first one's rank and bucket, and the day and month of that bucket)
--        denied  {0, now, then per candidate: verdict (1 never, 2 not now, 3 budget exhausted
--                 until its period ends), limit (1 cooldown, 2 rpm, 3 tpm, 4 concurrency,
--                 5 daily budget, 6 monthly budget, 7 itpm, 8 otpm), scope (1 deployment, 2 provider,
--                 3 tenant), at ms (when it would fit; 0 for never)}
-- The reply is decoded by `reply::admit` in router-core/src/ledger/redis/reply.rs.
-- Twin: `Engine::admit` in router-core/src/ledger/engine.rs.

local now = now_ms()
if ARGV[#ARGV] ~= '' and redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {2, now}
end
local id, ttl, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- The tokens to reserve on the candidate being looked at, and their input and output parts
-- (set per candidate).
local need, need_in, need_out = 0, 0, 0
-- Worked out once per call: in Redis's Lua, number-to-string conversions, tables and calls
-- cost more than the reads themselves.
local nb = math.floor(now / BUCKET_MS)
local oldest_live = nb - SPAN
local slot_end = fmt('%d', after(now, ttl))
local rb, tb, after_now = fmt('r%d', nb), fmt('t%d', nb), fmt('(%d', now)
local ib, xb = fmt('i%d', nb), fmt('x%d', nb)
local tenant = nil
local ai0, ki0 = 6, 2
if ARGV[5] == '1' then
  -- Its rpm, tpm and concurrency stay strings (ARGV[6..8]) for `fits`.
  tenant = {w = KEYS[2], z = KEYS[3], b = KEYS[4], tpm = tonumber(ARGV[7]),
    daily = tonumber(ARGV[9]), monthly = tonumber(ARGV[10]), costs = {}}
  for c = 1, n do
    tenant.costs[c] = tonumber(ARGV[10 + c])
  end
  ai0, ki0 = 11 + n, 5
end
-- Budget periods, worked out only for requests with a tenant.
local p = tenant and periods(now)

-- Per candidate c, its first KEYS and ARGV index (candidate blocks differ in length).
local kis, ais = {}, {}
do
  local ki, ai = ki0, ai0
  for c = 1, n do
    kis[c], ais[c] = ki, ai
    local own = tonumber(ARGV[ai + 2])
    ki = ki + 2 * own
    ai = ai + 3 + 5 * own
  end
end

-- Scope s (1 deployment, 2 provider) of candidate c: its window hash, slots zset, and its rpm,
-- tpm, itpm, otpm and concurrency as passed.
local function scope_of(c, s)
  local k, a = kis[c] + 2 * (s - 1), ais[c] + 5 * s - 2
  return KEYS[k], KEYS[k + 1], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
end

-- Sets need, need_in and need_out to candidate c's; returns its number of scopes.
local function load_need(c)
  need, need_in = tonumber(ARGV[ais[c]]), tonumber(ARGV[ais[c] + 1])
  need_in = math.min(need_in, need)
  need_out = need - need_in
  return tonumber(ARGV[ais[c] + 2])
end

-- An admission repeated with an id that holds a live slot on a candidate gets it back.
local prior = redis.call('GET', KEYS[1])
if prior then
  local b = tonumber(prior)
  for c = 1, n do
    local score = redis.call('ZSCORE', KEYS[kis[c] + 1], id)
    if b and score and tonumber(score) > now then
      local hp = tenant and periods(b * BUCKET_MS)
      return {1, now, c - 1, b, hp and hp.day or 0, hp and hp.month or 0}
    end
  end
end

-- Whether the tenant's budget refuses candidate c: a reply row, or nil.
local function over_budget(c)
  if tenant.day_spent == nil then
    tenant.day_spent, tenant.month_spent = spent(tenant.b, p)
  end
  local cost = tenant.costs[c]
  for _, b in ipairs({{tenant.daily, tenant.day_spent, p.day_end, 5},
      {tenant.monthly, tenant.month_spent, p.month_end, 6}}) do
    if b[1] > 0 and cost > b[1] then
      return {1, b[4], 3, 0}
    elseif b[1] > 0 and b[2] + cost > b[1] then
      return {3, b[4], 3, b[3]}
    end
  end
  return nil
end

-- Whether one more request of `need` tokens (need_in input, need_out output) fits in a scope
-- now: window hash w, slots zset z, scope code (1 deployment, 2 provider, 3 tenant) and limits
-- as passed in ARGV ('0' = unlimited). The common case (no bucket has left the window since the last write) is one HMGET
-- and no write; anything else goes through `expire`. Values are converted only when a limit
-- needs them: a full candidate costs its read and a few conversions. When it fits, st receives
-- what `take` needs. Without `reasons` it stops at the first full limit; with `reasons` (a list)
-- it appends every full limit to it.
local function fits(st, w, z, code, rpm, tpm, itpm, otpm, conc, reasons)
  local v = redis.call('HMGET', w, 'R', 'T', 'o', rb, tb, 'c', 'I', 'X', ib, xb)
  local o = tonumber(v[3])
  -- R, T, I, X, cr, ct, ci, cx, cd: stored strings (false when missing) on the common path,
  -- numbers otherwise.
  local R, T, I, X, bk, cr, ct, ci, cx, cd, init
  if o ~= nil and o >= oldest_live and o <= nb then
    R, T, bk, cr, ct, cd, init = v[1], v[2], nb, v[4], v[5], v[6], false
    I, X, ci, cx = v[7], v[8], v[9], v[10]
  else
    local x = expire(w, now, v)
    R, T, o, bk, cr, ct, cd, init = x.R, x.T, x.o, x.b, x.cr, x.ct, x.cd, x.init or false
    I, X, ci, cx = x.I, x.X, x.ci, x.cx
  end
  cd = cd and tonumber(cd) or 0
  local ok = true
  if code == 1 and cd > now then
    if not reasons then
      return false
    end
    ok = false
    reasons[#reasons + 1] = {kind = 1, s = 1, at = cd}
  end
  R = tonumber(R) or 0
  if rpm ~= '0' then
    local limit = tonumber(rpm)
    if R + 1 > limit then
      if not reasons then
        return false
      end
      ok = false
      reasons[#reasons + 1] = {kind = 2, s = code, key = w, o = o, total = R, prefix = 'r',
        need = 1, limit = limit}
    end
  end
  T = tonumber(T) or 0
  if tpm ~= '0' then
    local limit = tonumber(tpm)
    if T + need > limit then
      if not reasons then
        return false
      end
      ok = false
      reasons[#reasons + 1] = {kind = 3, s = code, key = w, o = o, total = T, prefix = 't',
        need = need, limit = limit}
    end
  end
  I = tonumber(I) or 0
  if itpm ~= '0' then
    local limit = tonumber(itpm)
    if I + need_in > limit then
      if not reasons then
        return false
      end
      ok = false
      reasons[#reasons + 1] = {kind = 7, s = code, key = w, o = o, total = I, prefix = 'i',
        need = need_in, limit = limit}
    end
  end
  X = tonumber(X) or 0
  if otpm ~= '0' then
    local limit = tonumber(otpm)
    if X + need_out > limit then
      if not reasons then
        return false
      end
      ok = false
      reasons[#reasons + 1] = {kind = 8, s = code, key = w, o = o, total = X, prefix = 'x',
        need = need_out, limit = limit}
    end
  end
  local live = nil
  if conc ~= '0' then
    live = redis.call('ZCOUNT', z, after_now, '+inf')
    if live >= tonumber(conc) then
      if not reasons then
        return false
      end
      ok = false
      reasons[#reasons + 1] = {kind = 4, s = code, z = z}
    end
  end
  if ok then
    st.w, st.z, st.R, st.T, st.o, st.bk, st.cd, st.init, st.live = w, z, R, T, o, bk, cd, init,
      live
    st.cr, st.ct = tonumber(cr) or 0, tonumber(ct) or 0
    st.I, st.X, st.ci, st.cx = I, X, tonumber(ci) or 0, tonumber(cx) or 0
  end
  return ok
end

-- The reply row of a refused candidate: the limit that frees last, and when.
local function verdict(reasons)
  local worst = nil
  for _, r in ipairs(reasons) do
    local at = r.at
    if r.kind == 2 or r.kind == 3 or r.kind == 7 or r.kind == 8 then
      at = fits_at(r.key, r.o, r.total, r.prefix, r.need, r.limit)
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

-- Reserves one request in scope st (checked by `fits`).
local function take(st)
  local b = st.bk
  local rk, tk, ik, xk = rb, tb, ib, xb
  if b ~= nb then
    rk, tk, ik, xk = fmt('r%d', b), fmt('t%d', b), fmt('i%d', b), fmt('x%d', b)
  end
  redis.call('HSET', st.w, rk, fmt('%d', st.cr + 1), tk, fmt('%d', st.ct + need),
    ik, fmt('%d', st.ci + need_in), xk, fmt('%d', st.cx + need_out),
    'R', fmt('%d', st.R + 1), 'T', fmt('%d', st.T + need),
    'I', fmt('%d', st.I + need_in), 'X', fmt('%d', st.X + need_out))
  if st.init then
    -- A new window (once per idle spell): store where it starts, and the layout note.
    redis.call('HSET', st.w, 'o', fmt('%d', st.o), 'h', LAYOUT_NOTE)
  end
  if st.cr == 0 and st.ct == 0 and st.ci == 0 and st.cx == 0 then
    -- First admission in this bucket: forget long-dead slots; the hash must outlive the bucket.
    forget_slots(st.z, now)
    redis.call('PEXPIRE', st.w, math.max(WINDOW_TTL_MS, st.cd - now))
  end
  -- Every admission refreshes the zset's TTL: a bucket pre-filled by a provider's report has
  -- counters before its first admission, so "first in the bucket" cannot be relied on.
  redis.call('ZADD', st.z, slot_end, id)
  redis.call('PEXPIRE', st.z, SLOTS_TTL_MS)
end

-- First pass: the first candidate where everything fits takes the request. What fits is kept
-- per scope position (deployment, provider) and for the tenant.
local held = {{}, {}}
local held_tenant = {}
for c = 1, n do
  local own = load_need(c)
  local ok = not (tenant and over_budget(c))
  for s = 1, own do
    if not ok then
      break
    end
    local w, z, rpm, tpm, itpm, otpm, conc = scope_of(c, s)
    ok = fits(held[s], w, z, s, rpm, tpm, itpm, otpm, conc)
  end
  if ok and tenant then
    -- The tenant's own limits refuse every candidate needing as many tokens or more alike.
    if tenant.refused_at and need >= tenant.refused_at then
      ok = false
    else
      ok = fits(held_tenant, tenant.w, tenant.z, 3, ARGV[6], ARGV[7], '0', '0', ARGV[8])
      if not ok then
        tenant.refused_at = need
      end
    end
  end
  if ok then
    if tenant then
      local cost = tenant.costs[c]
      redis.call('HSET', tenant.b, 'd', p.day, 'dm', tenant.day_spent + cost, 'm', p.month,
        'mm', tenant.month_spent + cost)
      redis.call('PEXPIRE', tenant.b, math.max(1, p.month_end - now) + DAY_MS)
      take(held_tenant)
    end
    for s = 1, own do
      take(held[s])
    end
    redis.call('SET', KEYS[1], fmt('%d', held[1].bk), 'PX', SLOTS_TTL_MS)
    return {1, now, c - 1, held[1].bk, p and p.day or 0, p and p.month or 0}
  end
end

-- Every candidate refused: work out why, and when each could take the request. A limit the
-- request can never fit under comes first, then the budget, then the limit that frees last.
local out = {0, now}
local scratch = {}
for c = 1, n do
  local own = load_need(c)
  local row = nil
  for s = 1, own do
    local _, _, _, tpm, itpm, otpm = scope_of(c, s)
    for _, t in ipairs({{tonumber(tpm), need, 3}, {tonumber(itpm), need_in, 7},
        {tonumber(otpm), need_out, 8}}) do
      if row == nil and t[1] > 0 and t[2] > t[1] then
        row = {1, t[3], s, 0}
      end
    end
  end
  if row == nil and tenant and tenant.tpm > 0 and need > tenant.tpm then
    row = {1, 3, 3, 0}
  end
  if row == nil and tenant then
    row = over_budget(c)
  end
  if row == nil then
    local reasons = {}
    for s = 1, own do
      local w, z, rpm, tpm, itpm, otpm, conc = scope_of(c, s)
      fits(scratch, w, z, s, rpm, tpm, itpm, otpm, conc, reasons)
    end
    if tenant then
      fits(scratch, tenant.w, tenant.z, 3, ARGV[6], ARGV[7], '0', '0', ARGV[8], reasons)
    end
    row = verdict(reasons)
  end
  for _, x in ipairs(row) do
    out[#out + 1] = x
  end
end
return out
