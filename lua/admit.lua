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
local out = {0, now}
local ki, ai = 1, 6

-- Why a candidate cannot take the request now: {verdict, limit, scope, at}; nil if it can.
local function check(scopes)
  for s, sc in ipairs(scopes) do
    if sc.tpm > 0 and need > sc.tpm then
      return {1, 3, s, 0}
    end
  end
  local worst = nil
  local function raise(at, kind, s)
    if worst == nil or at > worst[4] then
      worst = {2, kind, s, at}
    end
  end
  for s, sc in ipairs(scopes) do
    local w = expire(sc.w, now)
    sc.win = w
    if s == 1 and w.cd > now then
      raise(w.cd, 1, 1)
    end
    if w.fresh then
      redis.call('ZREMRANGEBYSCORE', sc.z, '-inf', now)
    end
    if sc.rpm > 0 and w.R + 1 > sc.rpm then
      raise(fits_at(sc.w, w.o, w.R, 'r', 1, sc.rpm), 2, s)
    end
    if sc.tpm > 0 and w.T + need > sc.tpm then
      raise(fits_at(sc.w, w.o, w.T, 't', need, sc.tpm), 3, s)
    end
    if sc.conc > 0 then
      sc.live = redis.call('ZCOUNT', sc.z, '(' .. now, '+inf')
      if sc.live >= sc.conc then
        local first = redis.call('ZRANGEBYSCORE', sc.z, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        raise(tonumber(first[2]), 4, s)
      end
    end
  end
  return worst
end

local function reserve(scopes)
  for _, sc in ipairs(scopes) do
    local w = sc.win
    redis.call('HSET', sc.w, 'r' .. w.b, w.cr + 1, 't' .. w.b, w.ct + need,
      'R', w.R + 1, 'T', w.T + need, 'o', w.o)
    redis.call('ZADD', sc.z, now + ttl, id)
    if w.fresh then
      -- First admission in this bucket: the hash must outlive it, and the slots zset every
      -- slot admitted during it.
      keep_window(sc.w, w, now)
      redis.call('PEXPIRE', sc.z, SLOTS_TTL_MS)
    elseif sc.live == nil or sc.live == 0 then
      -- The zset may have just been created (it disappears when its last slot is freed).
      redis.call('PEXPIRE', sc.z, SLOTS_TTL_MS)
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
  for _, x in ipairs(refusal) do
    out[#out + 1] = x
  end
end
return out
