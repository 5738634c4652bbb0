-- settle (contract v1): free a reservation's slots and correct its bucket. Also used to release
-- (request never reached the provider): then the request is handed back too.
--
-- KEYS, per scope of the reservation's deployment (the deployment, then its provider when it has
--   provider-wide limits): window hash, slots zset; then, with a tenant, its window hash, slots
--   zset and spend hash.
-- ARGV: [1] now ms or '', [2] reservation id, [3] bucket it was reserved in,
--   [4] token correction (actual - reserved; negative credits back), [5] request correction
--   (0 to settle, -1 to release), [6] number of deployment/provider scopes, [7] 1 with a tenant,
--   else 0; with a tenant: [8] cost correction in micro-USD (actual - reserved), [9] the day and
--   [10] the month the cost was reserved in.
-- The correction goes to the reserved bucket only if it is still in the window; a bucket that
-- left the window has nothing to correct, nor has a budget period that has ended. Counters never
-- go below zero. A live bucket's hash already has a TTL that outlives it.
-- Reply: {1} if settled now, {0} if it had been settled or released already, or its slot expired
--   (then nothing changes).

local now = now_ms()
if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then
  return {0}
end
local bucket, dt, dr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local scopes = tonumber(ARGV[6])
local tenant = ARGV[7] == '1'
local windows = tenant and scopes + 1 or scopes
for s = 1, windows do
  if s > 1 then
    redis.call('ZREM', KEYS[2 * s], ARGV[2])
  end
  if dt ~= 0 or dr ~= 0 then
    local w = expire(KEYS[2 * s - 1], now)
    if is_live(w, bucket) then
      adjust(KEYS[2 * s - 1], w, bucket, dr, dt)
    end
  end
end
if tenant and tonumber(ARGV[8]) ~= 0 then
  spend(KEYS[2 * windows + 1], tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[8]), now,
    periods(now).month_end)
end
return {1}
