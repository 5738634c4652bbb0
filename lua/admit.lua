-- admit (contract v1): reserve one request on the first candidate whose cooldown, deployment
-- limits and provider limits all fit, atomically across all candidates.
--
-- KEYS: with a tenant, first its window hash, slots zset and spend hash
--   (llmroute:{ns}:v1:w:t:<name>, ...:s:t:<name>, ...:b:t:<name>); then per candidate in the
--   caller's (cost) order, per scope (the deployment, then its provider when the provider has
--   provider-wide limits): the window hash and the slots zset (llmroute:{ns}:v1:w:<scope>,
--   llmroute:{ns}:v1:s:<scope>). The deployment's window hash also holds its cooldown.
-- ARGV: [1] now ms or '' (server time), [2] reservation id (opaque string), [3] tokens needed,
--   [4] slot ttl ms (at most one hour), [5] number of candidates n, [6] 1 with a tenant, else 0;
--   with a tenant: [7..9] its rpm, tpm, concurrency, [10..11] its daily and monthly budget in
--   micro-USD (0 = unlimited), then the request's estimated cost on each candidate (n values);
--   then per candidate: its number of scopes s (1 or 2), then per scope rpm, tpm, concurrency
--   (already scaled to the request's priority share). Every rpm, tpm and concurrency limit is a
--   decimal integer, and exactly '0' means unlimited.
-- Slots zset: member = reservation id, score = slot expiry ms. Slots with score <= now are dead:
--   not counted, and removed once per bucket. TTL: outlives the longest slot.
-- Reply: granted {1, now, rank (0-based candidate index), bucket, day, month}
--        denied  {0, now, then per candidate: verdict (1 never, 2 not now, 3 budget exhausted
--                 until its period ends), limit (1 cooldown, 2 rpm, 3 tpm, 4 concurrency,
--                 5 daily budget, 6 monthly budget), scope (1 deployment, 2 provider,
--                 3 tenant), at ms (when it would fit; 0 for never)}
-- The reply is decoded by `AdmitReply` in router-core/src/ledger/redis.rs.

local now = now_ms()
local id, need, ttl, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- Worked out once per call: in Redis's Lua, number-to-string conversions, tables and calls
-- cost more than the reads themselves.
local nb = math.floor(now / BUCKET_MS)
local oldest_live = nb - SPAN
local slot_end = fmt('%d', now + ttl)
local rb, tb, after_now = fmt('r%d', nb), fmt('t%d', nb), fmt('(%d', now)
local tenant = nil
local ai0, ki0 = 7, 1
if ARGV[6] == '1' then
  -- Its rpm, tpm and concurrency stay strings (ARGV[7..9]) for `fits`.
  tenant = {w = KEYS[1], z = KEYS[2], b = KEYS[3], tpm = tonumber(ARGV[8]),
    daily = tonumber(ARGV[10]), monthly = tonumber(ARGV[11]), costs = {}}
  for c = 1, n do
    tenant.costs[c] = tonumber(ARGV[11 + c])
  end
  ai0, ki0 = 12 + n, 4
end
-- Budget periods, worked out only for requests with a tenant.
local p = tenant and periods(now)

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

-- Whether one more request of `need` tokens fits in a scope now: window hash w, slots zset z,
-- scope code (1 deployment, 2 provider, 3 tenant) and limits as passed in ARGV ('0' =
-- unlimited). The common case (no bucket has left the window since the last write) is one HMGET
-- and no write; anything else goes through `expire`. Values are converted only when a limit
-- needs them: a full candidate costs its read and a few conversions. When it fits, st receives
-- what `take` needs. Without `reasons` it stops at the first full limit; with `reasons` (a list)
-- it appends every full limit to it.
local function fits(st, w, z, code, rpm, tpm, conc, reasons)
  local v = redis.call('HMGET', w, 'R', 'T', 'o', rb, tb, 'c')
  local o = tonumber(v[3])
  -- R, T, cr, ct, cd: stored strings (false when missing) on the common path, numbers otherwise.
  local R, T, bk, cr, ct, cd, init
  if o ~= nil and o >= oldest_live and o <= nb then
    R, T, bk, cr, ct, cd, init = v[1], v[2], nb, v[4], v[5], v[6], false
  else
    local x = expire(w, now, v)
    R, T, o, bk, cr, ct, cd, init = x.R, x.T, x.o, x.b, x.cr, x.ct, x.cd, x.init or false
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
  end
  return ok
end

-- The reply row of a refused candidate: the limit that frees last, and when.
local function verdict(reasons)
  local worst = nil
  for _, r in ipairs(reasons) do
    local at = r.at
    if r.kind == 2 or r.kind == 3 then
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
  local rk, tk = rb, tb
  if b ~= nb then
    rk, tk = fmt('r%d', b), fmt('t%d', b)
  end
  redis.call('HSET', st.w, rk, fmt('%d', st.cr + 1), tk, fmt('%d', st.ct + need),
    'R', fmt('%d', st.R + 1), 'T', fmt('%d', st.T + need))
  if st.init then
    -- A new window (once per idle spell): store where it starts, and the layout note.
    redis.call('HSET', st.w, 'o', fmt('%d', st.o), 'h', LAYOUT_NOTE)
  end
  if st.cr == 0 and st.ct == 0 then
    -- First admission in this bucket: reap dead slots; the hash must outlive the bucket, and
    -- the slots zset every slot admitted during it.
    redis.call('ZREMRANGEBYSCORE', st.z, '-inf', now)
    redis.call('ZADD', st.z, slot_end, id)
    redis.call('PEXPIRE', st.w, math.max(WINDOW_TTL_MS, st.cd - now))
    redis.call('PEXPIRE', st.z, SLOTS_TTL_MS)
  else
    redis.call('ZADD', st.z, slot_end, id)
    if st.live == nil or st.live == 0 then
      -- The zset may have just been created (it disappears when its last slot is freed).
      redis.call('PEXPIRE', st.z, SLOTS_TTL_MS)
    end
  end
end

-- First pass: the first candidate where everything fits takes the request. What fits is kept
-- per scope position (deployment, provider) and for the tenant.
local held = {{}, {}}
local held_tenant = {}
local ki, ai = ki0, ai0
for c = 1, n do
  local own = tonumber(ARGV[ai])
  local ok = not (tenant and over_budget(c))
  for s = 1, own do
    if not ok then
      break
    end
    local a = ai + 3 * s
    ok = fits(held[s], KEYS[ki + 2 * s - 2], KEYS[ki + 2 * s - 1], s, ARGV[a - 2], ARGV[a - 1],
      ARGV[a])
  end
  if ok and tenant then
    ok = fits(held_tenant, tenant.w, tenant.z, 3, ARGV[7], ARGV[8], ARGV[9])
    if not ok then
      -- The tenant's own limits refuse every candidate alike.
      break
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
    return {1, now, c - 1, held[1].bk, p and p.day or 0, p and p.month or 0}
  end
  ki = ki + 2 * own
  ai = ai + 1 + 3 * own
end

-- Every candidate refused: work out why, and when each could take the request. A limit the
-- request can never fit under comes first, then the budget, then the limit that frees last.
local out = {0, now}
local scratch = {}
ki, ai = ki0, ai0
for c = 1, n do
  local own = tonumber(ARGV[ai])
  local row = nil
  for s = 1, own do
    local tpm = tonumber(ARGV[ai + 3 * s - 1])
    if row == nil and tpm > 0 and need > tpm then
      row = {1, 3, s, 0}
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
      local a = ai + 3 * s
      fits(scratch, KEYS[ki + 2 * s - 2], KEYS[ki + 2 * s - 1], s, ARGV[a - 2], ARGV[a - 1],
        ARGV[a], reasons)
    end
    if tenant then
      fits(scratch, tenant.w, tenant.z, 3, ARGV[7], ARGV[8], ARGV[9], reasons)
    end
    row = verdict(reasons)
  end
  for _, x in ipairs(row) do
    out[#out + 1] = x
  end
  ki = ki + 2 * own
  ai = ai + 1 + 3 * own
end
return out
