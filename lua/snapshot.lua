-- snapshot (contract v3): usage of several deployments and their providers, in one call.
--
-- KEYS, per deployment, per scope (deployment, then provider when it has provider-wide limits):
--   window hash and slots zset, and its day hash when it has a per-day limit; then, after every
--   deployment's, per deployment its line's two keys (...:q:<scope>, ...:qx:<scope>).
-- ARGV: [1] now ms or '', [2] number of deployments n, then per deployment its number of
--   scopes (1 or 2) followed by, per scope, its current day's id ('-' without a per-day limit).
-- Reply: {now, then per deployment: cooldown end ms (0 if none), the provider's last report
--   (requests, tokens, input and output tokens remaining, -1 if not reported; when, ms, 0 if
--   never), then per scope R, T, I, X, in flight (live slots), requests and tokens counted in
--   its day (0 without a per-day limit); then per deployment the tickets in its line, how many
--   of them are batch requests', and the first one's rank (-1 when none waits)}.
-- Twin: `Engine::snapshot` in router-core/src/ledger/engine.rs.

local now = now_ms()
local out = {now}
local ki, ai = 1, 3
for d = 1, tonumber(ARGV[2]) do
  local scopes = tonumber(ARGV[ai])
  ai = ai + 1
  for s = 1, scopes do
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
    local day = ARGV[ai]
    ai = ai + 1
    if day == '-' then
      out[#out + 1] = 0
      out[#out + 1] = 0
    else
      local r, t = day_counted(KEYS[ki], day + 0)
      out[#out + 1] = r
      out[#out + 1] = t
      ki = ki + 1
    end
  end
end
for d = 1, tonumber(ARGV[2]) do
  local q, qx = KEYS[ki], KEYS[ki + 1]
  ki = ki + 2
  line_purge(q, qx, now)
  local all = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
  local batch = 0
  for i = 1, #all, 2 do
    if string.sub(all[i], -1) == 'b' then
      batch = batch + 1
    end
  end
  out[#out + 1] = #all / 2
  out[#out + 1] = batch
  out[#out + 1] = tonumber(all[2]) or -1
end
return out
