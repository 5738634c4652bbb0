-- settle (contract v1): free a reservation's slots and correct its bucket. Also used to release
-- (request never reached the provider): then the request is handed back too.
--
-- KEYS: [1] deployment window hash, [2] deployment slots zset, [3] provider window hash,
--   [4] provider slots zset.
-- ARGV: [1] now ms or '', [2] reservation id, [3] bucket it was reserved in,
--   [4] token correction (actual - reserved; negative credits back), [5] request correction
--   (0 to settle, -1 to release).
-- The correction goes to the reserved bucket only if it is still in the window; a bucket that
-- left the window has nothing to correct. Counters never go below zero.
-- Reply: {1} if settled now, {0} if it had been settled or released already, or its slot expired
--   (then nothing changes).

local now = now_ms()
local nb = math.floor(now / BUCKET_MS)
if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then
  return {0}
end
redis.call('ZREM', KEYS[4], ARGV[2])
local bucket, dt, dr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
for _, wkey in ipairs({KEYS[1], KEYS[3]}) do
  local _, _, o = expire(wkey, nb)
  if is_live(o, bucket) and (dt ~= 0 or dr ~= 0) then
    adjust(wkey, 't', 'T', bucket, dt)
    adjust(wkey, 'r', 'R', bucket, dr)
    redis.call('PEXPIRE', wkey, WINDOW_TTL_MS)
  end
end
return {1}
