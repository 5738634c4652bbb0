-- tenant_snapshot (contract v3): a tenant's use and spend in the current UTC day and month.
--
-- KEYS: [1] the tenant's window hash, [2] its slots zset, [3] its spend hash, [4] its day hash.
-- ARGV: [1] now ms or ''.
-- Reply: {now, R, T, I, X, in flight, spent today, spent this month (micro-USD), day end, month end,
--   month start (ms), requests and tokens counted today (UTC)}.
-- Twin: `Engine::tenant_snapshot` in router-core/src/ledger/engine.rs.

local now = now_ms()
local w = expire(KEYS[1], now)
local p = periods(now)
local day, month = spent(KEYS[3], p)
local in_flight = redis.call('ZCOUNT', KEYS[2], fmt('(%d', now), '+inf')
local day_r, day_t = day_counted(KEYS[4], p.day)
return {now, w.R, w.T, w.I, w.X, in_flight, day, month, p.day_end, p.month_end, p.month_start,
  day_r, day_t}
