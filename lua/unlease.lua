-- unlease (contract v3): correct what a lease (lease.lua) counted by what its requests really
-- used: the unused part of the block goes back (negative corrections), usage beyond it is
-- added. The correction goes to the bucket it names, if still in the window (see `correct` in
-- update.lua); counters never go below zero. Optionally followed by the provider's latest
-- rate-limit report on the deployment (as observe.lua). While the store answers, heartbeats
-- carry these corrections (heartbeat.lua applies them the same way); this script sends what is
-- left when an instance closes.
--
-- KEYS: the deployment's window hash, then, when its provider has provider-wide limits, the
--   provider's window hash; then the call's record (see common.lua: a call run again answers as
--   it did the first time, and changes nothing); last, the epoch key.
-- ARGV: [1] now ms or '', [2] the lease's bucket, [3..6] request, token, input and output token
--   corrections, [7] 1 when a report follows, else 0; with one, [8 ..] is what observe.lua takes
--   from its ARGV[2] on; last, the epoch the instance knows ('' to skip the check).
-- Reply: {1}, or {2} (nothing applied) when the stored epoch is not the instance's: the windows
--   were lost or rebuilt since, and hold nothing of the lease to correct.

local now = now_ms()
if ARGV[#ARGV] ~= '' and redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {2}
end
-- The epoch first: a reply of another epoch's windows is never answered again.
local call = KEYS[#KEYS - 1]
local earlier = replayed(call)
if earlier then
  return earlier
end
local bucket = tonumber(ARGV[2])
local dr, dt, di, dx = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6])
for i = 1, #KEYS - 2 do
  local w = expire(KEYS[i], now)
  correct(KEYS[i], w, bucket, dr, dt, di, dx, now)
end
if ARGV[7] == '1' then
  observe_at(KEYS[1], now, 8)
end
return remembered(call, {1})
