-- tenant_lease (contract v3): grant an instance a block of a tenant's limits and budgets (n
-- requests, t tokens and m micro-USD), counted at once where an admission of the tenant counts
-- (its window, its day and its spend), so that the instance admits the tenant's requests from
-- the block without calling Redis. The instance uses a block only within the second it was
-- granted in, so its requests count in the second they are admitted in. What the block did not
-- hand out, and what its requests used beyond what they reserved, come back as corrections with
-- the tenant's next call.
--
-- KEYS: [1] the tenant's window hash, [2] its day hash, [3] its spend hash (as admit.lua names
--   them), then the call's record (see common.lua: a call run again answers as it did the first
--   time, and changes nothing) and the epoch key.
-- ARGV: [1] now ms or '', [2..4] the requests, tokens and micro-USD wanted, [5..7] the fewest of
--   each worth a block (less room than that: nothing is granted), [8] parts p: the block takes
--   at most 1/p of the room left of each (never less than the fewest), [9..14] the tenant's
--   rpm, tpm, rpd, tpd, daily and monthly budget in micro-USD (0 = unlimited), [15] the number
--   of corrections c, then c times a bucket and its request, token and micro-USD corrections
--   (negative gives back), applied first: to that bucket of the window if it is still live, to
--   that bucket's UTC day if it is still the stored one, and to its day's and month's spend
--   if they are still the stored ones; counters never go below zero. Last, the epoch the
--   instance knows ('' to skip the check).
-- A call wanting no request only applies its corrections.
-- Reply: granted {1, now, requests, tokens, micros, bucket, then the requests and tokens the
--   tenant's window counts with the block}; refused {0, now}; {2, now} when the
--   stored epoch is not the instance's (nothing applied, nothing kept).

local now = now_ms()
if ARGV[#ARGV] ~= '' and redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {2, now}
end
local call = KEYS[#KEYS - 1]
local earlier = replayed(call)
if earlier then
  return earlier
end
local wk, yk, bk = KEYS[1], KEYS[2], KEYS[3]
local p = periods(now)
for c = 1, tonumber(ARGV[15]) do
  local a = 15 + 4 * (c - 1)
  local bucket = tonumber(ARGV[a + 1])
  local dr, dt, dm = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  correct(wk, expire(wk, now), bucket, dr, dt, 0, 0, now)
  local bp = periods(bucket * BUCKET_MS)
  day_adjust(yk, bp.day, dr, dt)
  if dm ~= 0 then
    spend(bk, bp.day, bp.month, dm, now, p.month_end)
  end
end

local want = {tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
if want[1] == 0 then
  -- A call that only carries corrections.
  return remembered(call, {0, now})
end
local fewest = {tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])}
local parts = tonumber(ARGV[8])
local rpm, tpm, rpd, tpd = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]),
  tonumber(ARGV[12])
local daily, monthly = tonumber(ARGV[13]), tonumber(ARGV[14])
local w = expire(wk, now)
local day_r, day_t = day_counted(yk, p.day)
local day_m, month_m = spent(bk, p)
-- The room left of each: requests, tokens, micro-USD (nil: unlimited).
local room = {}
local function cap(i, limit, used)
  if limit > 0 then
    local left = limit - used
    if room[i] == nil or left < room[i] then
      room[i] = left
    end
  end
end
cap(1, rpm, w.R)
cap(2, tpm, w.T)
cap(1, rpd, day_r)
cap(2, tpd, day_t)
cap(3, daily, day_m)
cap(3, monthly, month_m)
for i = 1, 3 do
  if room[i] ~= nil then
    if room[i] < fewest[i] then
      return remembered(call, {0, now})
    end
    want[i] = math.min(want[i], math.max(fewest[i], math.floor(room[i] / parts)))
  end
end
adjust(wk, w, w.b, want[1], want[2], 0, 0, now)
if rpd > 0 or tpd > 0 then
  redis.call('HSET', yk, 'd', fmt('%d', p.day), 'r', fmt('%d', day_r + want[1]), 't',
    fmt('%d', day_t + want[2]))
  redis.call('PEXPIRE', yk, math.max(1, p.day_end - now) + DAY_MS)
end
redis.call('HSET', bk, 'd', p.day, 'dm', day_m + want[3], 'm', p.month, 'mm', month_m + want[3])
redis.call('PEXPIRE', bk, math.max(1, p.month_end - now) + DAY_MS)
return remembered(call, {1, now, want[1], want[2], want[3], w.b, w.R + want[1], w.T + want[2]})
