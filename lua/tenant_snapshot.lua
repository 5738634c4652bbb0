-- tenant_snapshot (contract v1): a tenant's use and spend in the current UTC day and month.
--
-- KEYS: [1] the tenant's window hash, [2] its slots zset, [3] its spend hash.
-- ARGV: [1] now ms or ''.
-- Reply: {now, R, T, in flight, spent today, spent this month (micro-USD), day end, month end,
--   month start (ms)}.

local now = now_ms()
local w = expire(KEYS[1], now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local p = periods(now)
local day, month = spent(KEYS[3], p)
return {now, w.R, w.T, redis.call('ZCARD', KEYS[2]), day, month, p.day_end, p.month_end,
  p.month_start}
