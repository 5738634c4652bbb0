-- admit (contract v1): reserve one request on the first candidate whose cooldown, deployment
-- limits and provider limits all fit, atomically across all candidates.
--
-- KEYS: with a tenant, first its window hash, slots zset and spend hash (llmroute:{ns}:v1:w:t:<name>,
--   ...:s:t:<name>, ...:b:t:<name>); then per candidate in the caller's (cost) order, per scope
--   (the deployment, then its provider when the provider has provider-wide limits): the window
--   hash and the slots zset (llmroute:{ns}:v1:w:<scope>, llmroute:{ns}:v1:s:<scope>). The
--   deployment's window hash also holds its cooldown.
-- ARGV: [1] now ms or '' (server time), [2] reservation id (opaque string), [3] tokens needed,
--   [4] slot ttl ms (at most one hour), [5] number of candidates n, [6] 1 with a tenant, else 0;
--   with a tenant: [7..9] its rpm, tpm, concurrency, [10..11] its daily and monthly budget in
--   micro-USD (0 = unlimited), then the request's estimated cost on each candidate (n values);
--   then per candidate: its number of scopes s (1 or 2), then per scope rpm, tpm, concurrency
--   (0 = unlimited; already scaled to the request's priority share).
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
local ki, ai = 1, 7
local refusals = {}
local tenant = nil
if ARGV[6] == '1' then
  tenant = {w = KEYS[1], z = KEYS[2], b = KEYS[3], code = 3, rpm = tonumber(ARGV[7]),
    tpm = tonumber(ARGV[8]), conc = tonumber(ARGV[9]), daily = tonumber(ARGV[10]),
    monthly = tonumber(ARGV[11]), costs = {}}
  for c = 1, n do
    tenant.costs[c] = tonumber(ARGV[11 + c])
  end
  ki, ai = 4, 12 + n
end
-- Budget periods, worked out only for requests with a tenant.
local p = tenant and periods(now)

-- Whether the tenant's budget refuses candidate c: a reply row, or nil.
local function over_budget(c)
  if tenant == nil then
    return nil
  end
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

-- Why a candidate cannot take the request now: nil if it can; else {never = reply row} or
-- {reasons = ...}. Working out when a full limit frees up costs a read of every bucket, so it
-- is left to `verdict`, which only runs when every candidate refused.
local function check(scopes, c)
  for _, sc in ipairs(scopes) do
    if sc.tpm > 0 and need > sc.tpm then
      return {never = {1, 3, sc.code, 0}}
    end
  end
  local budget = over_budget(c)
  if budget then
    return {never = budget}
  end
  local reasons = {}
  for _, sc in ipairs(scopes) do
    local s = sc.code
    local w = sc.win
    if w == nil or sc ~= tenant then
      w = expire(sc.w, now)
      sc.win = w
    end
    if s == 1 and w.cd > now then
      reasons[#reasons + 1] = {kind = 1, s = 1, at = w.cd}
    end
    if sc.rpm > 0 and w.R + 1 > sc.rpm then
      reasons[#reasons + 1] = {kind = 2, s = s, key = sc.w, o = w.o, total = w.R, prefix = 'r',
        need = 1, limit = sc.rpm}
    end
    if sc.tpm > 0 and w.T + need > sc.tpm then
      reasons[#reasons + 1] = {kind = 3, s = s, key = sc.w, o = w.o, total = w.T, prefix = 't',
        need = need, limit = sc.tpm}
    end
    if sc.conc > 0 then
      sc.live = redis.call('ZCOUNT', sc.z, '(' .. now, '+inf')
      if sc.live >= sc.conc then
        reasons[#reasons + 1] = {kind = 4, s = s, z = sc.z}
      end
    end
  end
  if #reasons == 0 then
    return nil
  end
  return {reasons = reasons}
end

-- The reply row of a refusal: the limit that frees last, and when.
local function verdict(refusal)
  if refusal.never then
    return refusal.never
  end
  local worst = nil
  for _, r in ipairs(refusal.reasons) do
    local at = r.at
    if r.kind == 2 or r.kind == 3 then
      at = fits_at(r.key, r.o, r.total, r.prefix, r.need, r.limit)
    elseif r.kind == 4 then
      -- Slots are freed when requests settle, which no clock predicts: poll, bounded by the
      -- oldest slot's expiry.
      local first = redis.call('ZRANGEBYSCORE', r.z, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      at = math.min(tonumber(first[2]) or now, now + CONCURRENCY_POLL_MS)
    end
    if worst == nil or at > worst[4] then
      worst = {2, r.kind, r.s, at}
    end
  end
  return worst
end

local function reserve(scopes, c)
  if tenant then
    local cost = tenant.costs[c]
    redis.call('HSET', tenant.b, 'd', p.day, 'dm', tenant.day_spent + cost, 'm', p.month,
      'mm', tenant.month_spent + cost)
    redis.call('PEXPIRE', tenant.b, math.max(1, p.month_end - now) + DAY_MS)
  end
  for _, sc in ipairs(scopes) do
    local w = sc.win
    redis.call('HSET', sc.w, 'r' .. w.b, w.cr + 1, 't' .. w.b, w.ct + need,
      'R', w.R + 1, 'T', w.T + need, 'o', w.o)
    if w.fresh then
      -- First admission in this bucket: reap dead slots; the hash must outlive the bucket, and
      -- the slots zset every slot admitted during it.
      redis.call('ZREMRANGEBYSCORE', sc.z, '-inf', now)
      redis.call('ZADD', sc.z, now + ttl, id)
      keep_window(sc.w, w, now)
      redis.call('PEXPIRE', sc.z, SLOTS_TTL_MS)
    else
      redis.call('ZADD', sc.z, now + ttl, id)
      if sc.live == nil or sc.live == 0 then
        -- The zset may have just been created (it disappears when its last slot is freed).
        redis.call('PEXPIRE', sc.z, SLOTS_TTL_MS)
      end
    end
  end
end

for c = 1, n do
  local scopes = {}
  local own = tonumber(ARGV[ai])
  for s = 1, own do
    scopes[s] = {
      w = KEYS[ki + 2 * s - 2], z = KEYS[ki + 2 * s - 1], code = s,
      rpm = tonumber(ARGV[ai + 3 * s - 2]), tpm = tonumber(ARGV[ai + 3 * s - 1]),
      conc = tonumber(ARGV[ai + 3 * s]),
    }
  end
  ki = ki + 2 * own
  ai = ai + 1 + 3 * own
  if tenant then
    scopes[#scopes + 1] = tenant
  end
  local refusal = check(scopes, c)
  if refusal == nil then
    reserve(scopes, c)
    return {1, now, c - 1, scopes[1].win.b, p and p.day or 0, p and p.month or 0}
  end
  refusals[c] = refusal
end
local out = {0, now}
for c = 1, n do
  for _, x in ipairs(verdict(refusals[c])) do
    out[#out + 1] = x
  end
end
return out
