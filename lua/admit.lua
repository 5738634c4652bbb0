-- admit (contract v1): reserve one request on the first candidate whose cooldown, deployment
-- limits and provider limits all fit, atomically across all candidates.
--
-- KEYS, per candidate in the caller's (cost) order, per scope (the deployment, then its provider
--   when the provider has provider-wide limits): the window hash and the slots zset
--   (llmroute:{ns}:v1:w:<scope>, llmroute:{ns}:v1:s:<scope>). The deployment's window hash also
--   holds its cooldown.
-- ARGV: [1] now ms or '' (server time), [2] reservation id (opaque string), [3] tokens needed,
--   [4] slot ttl ms (at most one hour), [5] number of candidates n,
--   then per candidate: its number of scopes s (1 or 2), then per scope rpm, tpm, concurrency
--   (0 = unlimited).
-- Slots zset: member = reservation id, score = slot expiry ms. Slots with score <= now are dead:
--   not counted, and removed once per bucket. TTL: outlives the longest slot.
-- Reply: granted {1, now, rank (0-based candidate index), bucket}
--        denied  {0, now, then per candidate: verdict (1 never, 2 not now),
--                 limit (1 cooldown, 2 rpm, 3 tpm, 4 concurrency), scope (1 deployment,
--                 2 provider), at ms (when it would fit; 0 for never)}
-- The reply is decoded by `AdmitReply` in router-core/src/ledger/redis.rs.

local now = now_ms()
local id, need, ttl, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ki, ai = 1, 6
local refusals = {}

-- Why a candidate cannot take the request now: nil if it can; else {never = reply row} or
-- {reasons = ...}. Working out when a full limit frees up costs a read of every bucket, so it
-- is left to `verdict`, which only runs when every candidate refused.
local function check(scopes)
  for s, sc in ipairs(scopes) do
    if sc.tpm > 0 and need > sc.tpm then
      return {never = {1, 3, s, 0}}
    end
  end
  local reasons = {}
  for s, sc in ipairs(scopes) do
    local w = expire(sc.w, now)
    sc.win = w
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
      local first = redis.call('ZRANGEBYSCORE', r.z, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      at = tonumber(first[2])
    end
    if worst == nil or at > worst[4] then
      worst = {2, r.kind, r.s, at}
    end
  end
  return worst
end

local function reserve(scopes)
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
  for s = 1, tonumber(ARGV[ai]) do
    scopes[s] = {
      w = KEYS[ki + 2 * s - 2], z = KEYS[ki + 2 * s - 1],
      rpm = tonumber(ARGV[ai + 3 * s - 2]), tpm = tonumber(ARGV[ai + 3 * s - 1]),
      conc = tonumber(ARGV[ai + 3 * s]),
    }
  end
  ki = ki + 2 * #scopes
  ai = ai + 1 + 3 * #scopes
  local refusal = check(scopes)
  if refusal == nil then
    reserve(scopes)
    return {1, now, c - 1, scopes[1].win.b}
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
