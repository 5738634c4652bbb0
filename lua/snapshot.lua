-- snapshot (contract v3): usage of several deployments and their providers, in one call.
--
-- KEYS, per deployment, per scope (deployment, then provider when it has provider-wide limits):
--   window hash and slots zset.
-- ARGV: [1] now ms or '', [2] number of deployments n, then per deployment its number of
--   scopes (1 or 2).
-- Reply: {now, then per deployment: cooldown end ms (0 if none), the provider's last report
--   (requests, tokens, input and output tokens remaining, -1 if not reported; when, ms, 0 if
--   never), then per scope R, T, I, X, in flight (live slots)}.
-- Twin: `Engine::snapshot` in router-core/src/ledger/engine.rs.

local now = now_ms()
local out = {now}
local ki = 1
for d = 1, tonumber(ARGV[2]) do
  for s = 1, tonumber(ARGV[2 + d]) do
    local w = expire(KEYS[ki], now)
    if s == 1 then
      local q = redis.call('HMGET', KEYS[ki], 'qr', 'qt', 'qi', 'qx', 'qa')
      out[#out + 1] = w.cd
      for i = 1, 4 do
        out[#out + 1] = tonumber(q[i]) or -1
      end
      out[#out + 1] = tonumber(q[5]) or 0
    end
    out[#out + 1] = w.R
    out[#out + 1] = w.T
    out[#out + 1] = w.I
    out[#out + 1] = w.X
    out[#out + 1] = redis.call('ZCOUNT', KEYS[ki + 1], fmt('(%d', now), '+inf')
    ki = ki + 2
  end
end
return out
