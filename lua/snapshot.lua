-- snapshot (contract v1): usage of several deployments and their providers, in one call.
--
-- KEYS, per deployment, 5 keys: cooldown key, deployment window hash, deployment slots zset,
--   provider window hash, provider slots zset.
-- ARGV: [1] now ms or '', [2] number of deployments n.
-- Reply: {now, then per deployment: cooldown end ms (0 if none), deployment R, T, in flight,
--   provider R, T, in flight}.

local now = now_ms()
local nb = math.floor(now / BUCKET_MS)
local out = {now}
for d = 1, tonumber(ARGV[2]) do
  local kb = (d - 1) * 5
  out[#out + 1] = tonumber(redis.call('GET', KEYS[kb + 1]) or '0') or 0
  for s = 1, 2 do
    local R, T = expire(KEYS[kb + 2 * s], nb)
    local skey = KEYS[kb + 2 * s + 1]
    redis.call('ZREMRANGEBYSCORE', skey, '-inf', now)
    out[#out + 1] = R
    out[#out + 1] = T
    out[#out + 1] = redis.call('ZCARD', skey)
  end
end
return out
