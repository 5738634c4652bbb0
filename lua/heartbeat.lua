-- heartbeat (contract v3): an instance says it is alive, learns how many instances share the
-- limits and which epoch the store is in, and reads what it needs to run on its own share of
-- every limit should the store stop answering (see router-core/src/ledger/resilient.rs).
--
-- KEYS: [1] the instances zset (llmroute:{ns}:v3:instances: member = instance id, score = when
--   its registration expires, ms), [2] the epoch key (llmroute:{ns}:v3:epoch), then the window
--   hash of each of the n scopes, then per tenant its window hash and spend hash.
-- ARGV: [1] now ms or '', [2] this instance's id, [3] how long its registration lasts (ms),
--   [4] n, the number of scopes, [5] the number of tenants.
-- The epoch is a number restore.lua stores when it finds none: a store that lost its keys (a
--   restarted Redis without persistence) has no epoch, and every instance then knows the
--   windows it sees are not the whole story. Its TTL (EPOCH_TTL_MS) is refreshed here.
-- Reply: {live instances (this one included), epoch (0: none), the current UTC day and month
--   (budget periods, see common.lua), then per scope R, T, I, X (its
--   window totals), then per tenant R, T, I, X, spent today, spent this month (micro-USD)}.

local now = now_ms()
local ttl, n, tenants = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], fmt('%d', now + ttl), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt('%d', now))
redis.call('PEXPIRE', KEYS[1], ttl)
local live = redis.call('ZCARD', KEYS[1])
local epoch = tonumber(redis.call('GET', KEYS[2])) or 0
if epoch ~= 0 then
  redis.call('PEXPIRE', KEYS[2], EPOCH_TTL_MS)
end
local p = periods(now)
local out = {live, epoch, p.day, p.month}
for s = 1, n do
  local w = expire(KEYS[2 + s], now)
  out[#out + 1] = w.R
  out[#out + 1] = w.T
  out[#out + 1] = w.I
  out[#out + 1] = w.X
end
for t = 1, tenants do
  local k = 2 + n + 2 * (t - 1)
  local w = expire(KEYS[k + 1], now)
  local day, month = spent(KEYS[k + 2], p)
  out[#out + 1] = w.R
  out[#out + 1] = w.T
  out[#out + 1] = w.I
  out[#out + 1] = w.X
  out[#out + 1] = day
  out[#out + 1] = month
end
return out
