-- admit (contract v1): reserve one request on the first candidate whose cooldown, deployment
-- limits and provider limits all fit, atomically across all candidates.
--
-- KEYS, per candidate in the caller's (cost) order, 5 keys:
--   cooldown key (llmroute:{ns}:v1:cd:<deployment>),
--   deployment window hash, deployment slots zset, provider window hash, provider slots zset
--   (llmroute:{ns}:v1:w:<scope>, llmroute:{ns}:v1:s:<scope>).
-- ARGV: [1] now ms or '' (server time), [2] reservation id (opaque string), [3] tokens needed,
--   [4] slot ttl ms, [5] number of candidates n,
--   then per candidate 6 numbers: rpm, tpm, concurrency of the deployment, then of the provider
--   (0 = unlimited).
-- Slots zset: member = reservation id, score = slot expiry ms; TTL extended to outlive its
--   newest slot. Expired slots (score <= now) are removed before counting.
-- Reply: granted {1, now, rank (0-based candidate index), bucket}
--        denied  {0, now, then per candidate: verdict (1 never, 2 not now),
--                 limit (1 cooldown, 2 rpm, 3 tpm, 4 concurrency), scope (1 deployment,
--                 2 provider), at ms (when it would fit; 0 for never)}
-- The reply is decoded by `AdmitReply` in router-core/src/ledger/redis.rs.

local now = now_ms()
local nb = math.floor(now / BUCKET_MS)
local id, need, ttl, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {0, now}

for c = 1, n do
  local kb = (c - 1) * 5
  local ab = 5 + (c - 1) * 6
  local lim = {}
  local never = nil
  for s = 1, 2 do
    local a = ab + (s - 1) * 3
    lim[s] = {tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])}
    if never == nil and lim[s][2] > 0 and need > lim[s][2] then
      never = s
    end
  end
  if never then
    for _, x in ipairs({1, 3, never, 0}) do out[#out + 1] = x end
  else
    local worst_at, worst_kind, worst_scope = nil, nil, nil
    local function raise(at, kind, scope)
      if worst_at == nil or at > worst_at then
        worst_at, worst_kind, worst_scope = at, kind, scope
      end
    end
    local cd = tonumber(redis.call('GET', KEYS[kb + 1]) or '0') or 0
    if cd > now then
      raise(cd, 1, 1)
    end
    local st = {}
    for s = 1, 2 do
      local wkey, skey = KEYS[kb + 2 * s], KEYS[kb + 2 * s + 1]
      local R, T, o, b = expire(wkey, nb)
      redis.call('ZREMRANGEBYSCORE', skey, '-inf', now)
      local rpm, tpm, conc = lim[s][1], lim[s][2], lim[s][3]
      if rpm > 0 and R + 1 > rpm then
        raise(fits_at(wkey, o, R, 'r', 1, rpm), 2, s)
      end
      if tpm > 0 and T + need > tpm then
        raise(fits_at(wkey, o, T, 't', need, tpm), 3, s)
      end
      if conc > 0 and redis.call('ZCARD', skey) >= conc then
        local first = redis.call('ZRANGE', skey, 0, 0, 'WITHSCORES')
        raise(tonumber(first[2]), 4, s)
      end
      st[s] = {o, b}
    end
    if worst_at == nil then
      local expiry = now + ttl
      for s = 1, 2 do
        local wkey, skey = KEYS[kb + 2 * s], KEYS[kb + 2 * s + 1]
        local o, b = st[s][1], st[s][2]
        redis.call('HINCRBY', wkey, 'r' .. b, 1)
        redis.call('HINCRBY', wkey, 't' .. b, need)
        redis.call('HINCRBY', wkey, 'R', 1)
        redis.call('HINCRBY', wkey, 'T', need)
        redis.call('HSET', wkey, 'o', o)
        redis.call('PEXPIRE', wkey, WINDOW_TTL_MS)
        redis.call('ZADD', skey, expiry, id)
        if redis.call('PTTL', skey) < ttl + BUCKET_MS then
          redis.call('PEXPIRE', skey, ttl + BUCKET_MS)
        end
      end
      return {1, now, c - 1, st[1][2]}
    end
    for _, x in ipairs({2, worst_kind, worst_scope, worst_at}) do out[#out + 1] = x end
  end
end
return out
