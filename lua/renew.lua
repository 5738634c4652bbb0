-- renew (contract v3): keep a live reservation's slot held (a heartbeat): its expiry becomes
-- now + ttl in every scope holding it.
--
-- KEYS: [1] the reservation key, [2] the deployment's slots zset, then the slots zset of its
--   provider (when it has provider-wide limits) and of each of its accounts (the tenant's, the
--   key's).
-- ARGV: [1] now ms or '', [2] reservation id, [3] ttl ms (at most one hour).
-- Every key involved gets its TTL refreshed (SLOTS_TTL_MS outlives the slot and its grace).
-- Reply: {1} renewed, {0} the slot is gone (settled, released or expired).
-- Twin: `Engine::renew` in router-core/src/ledger/engine.rs.

local now = now_ms()
local id = ARGV[2]
local score = redis.call('ZSCORE', KEYS[2], id)
if not score or tonumber(score) <= now then
  return {0}
end
local ttl = tonumber(ARGV[3])
local expiry = fmt('%d', after(now, ttl))
for k = 2, #KEYS do
  redis.call('ZADD', KEYS[k], 'XX', expiry, id)
  redis.call('PEXPIRE', KEYS[k], SLOTS_TTL_MS_ARG)
end
redis.call('PEXPIRE', KEYS[1], SLOTS_TTL_MS_ARG)
return {1}
