-- settle (contract v3): free a reservation's slots and correct its bucket. Also used to release
-- (request never reached the provider): then the request is handed back too.
--
-- KEYS: [1] the reservation key; then the deployment's window hash and slots zset; then, when
--   its provider has provider-wide limits, the provider's window hash and slots zset; then per
--   account (the tenant's, the key's) its window hash, slots zset, spend hash and day hash;
--   then the day hash of each deployment/provider scope given a day in ARGV (see below).
-- ARGV: [1] now ms or '', [2] reservation id, [3] bucket it was reserved in,
--   [4] token correction (actual - reserved; negative credits back), [5] request correction
--   (0 to settle, -1 to release), [6] input token correction, [7] output token correction,
--   [8] number of deployment/provider scopes, [9] number of accounts (0, 1 or 2); with
--   accounts: [10] cost correction in micro-USD (actual - reserved), [11] the day and [12] the
--   month the cost was reserved in (the day is also the accounts' day, UTC); then, at index
--   o0 (10 without accounts, 13 with), per deployment/provider scope the day its admission was
--   counted in, or '-' when the scope has no per-day limit; then, at index o (o0 plus the
--   number of scopes): 1 when the
--   provider's rate-limit report on the deployment comes along, else 0; with a report,
--   [o + 1 ..] is what observe.lua takes from its ARGV[2] on (limits, then remaining and reset
--   of each dimension), followed on the deployment's window hash after the settlement, whether
--   or not the slot was still there: settlement and observation are one call, sent after the
--   caller has its answer. Last of all: KEYS ends with the deployment's line keys (...:q:<scope>
--   and ...:qx:<scope>) and ARGV with the wake-up channel: a settlement wakes whoever is first
--   in the line.
-- A slot that expired less than SETTLE_GRACE_MS ago is still settled (a late settle): the
-- correction goes to the reserved bucket only if it is still in the window; a bucket that left
-- the window has nothing to correct, nor has a budget period or a day that has ended (the
-- request and token corrections apply to the day's counts too). Counters never go below zero.
-- A live bucket's hash already has a TTL that outlives it.
-- Reply: {1} if settled now, {0} if it had been settled or released already, or its slot is
--   forgotten (expired SETTLE_GRACE_MS or more ago; then nothing changes but the slot's removal).
-- Twin: `Engine::finish` in router-core/src/ledger/engine.rs.

local now = now_ms()
local id = ARGV[2]
local accounts = tonumber(ARGV[9])
local o0 = accounts > 0 and 13 or 10

-- Settles the slot: 1 if settled now, 0 if there was nothing left to settle.
local function settle_slot()
  local score = redis.call('ZSCORE', KEYS[3], id)
  if not score then
    return 0
  end
  if tonumber(score) > now then
    -- The live slot of this id is its latest admission: the reservation key is its own. (A dead
    -- slot's settlement leaves the key to a newer admission of the same id, or to its TTL.)
    redis.call('DEL', KEYS[1])
  end
  if tonumber(score) + SETTLE_GRACE_MS <= now then
    -- Forgotten (whether or not reaped yet): other scopes are left alone, their slot of this id
    -- may be a newer admission's.
    redis.call('ZREM', KEYS[3], id)
    return 0
  end
  local scopes = tonumber(ARGV[8])
  -- Window hash and slots zset of each scope holding the slot.
  local pairs_ = {{KEYS[2], KEYS[3]}}
  if scopes == 2 then
    pairs_[2] = {KEYS[4], KEYS[5]}
  end
  local ti = 2 + 2 * scopes
  for j = 0, accounts - 1 do
    pairs_[#pairs_ + 1] = {KEYS[ti + 4 * j], KEYS[ti + 4 * j + 1]}
  end
  for _, k in ipairs(pairs_) do
    redis.call('ZREM', k[2], id)
  end
  local bucket, dt, dr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local di, dx = tonumber(ARGV[6]), tonumber(ARGV[7])
  if dt ~= 0 or dr ~= 0 or di ~= 0 or dx ~= 0 then
    for _, k in ipairs(pairs_) do
      local w = expire(k[1], now)
      if is_live(w, bucket) then
        adjust(k[1], w, bucket, dr, dt, di, dx, now)
      end
    end
    -- The days: each day-limited scope's, then each account's (UTC: the day of its spend).
    local yk = ti + 4 * accounts
    for s = 1, scopes do
      local day = ARGV[o0 + s - 1]
      if day ~= '-' then
        day_adjust(KEYS[yk], day + 0, dr, dt)
        yk = yk + 1
      end
    end
    for j = 0, accounts - 1 do
      day_adjust(KEYS[ti + 4 * j + 3], tonumber(ARGV[11]), dr, dt)
    end
  end
  if accounts > 0 and tonumber(ARGV[10]) ~= 0 then
    local month_end = periods(now).month_end
    for j = 0, accounts - 1 do
      spend(KEYS[ti + 4 * j + 2], tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[10]),
        now, month_end)
    end
  end
  return 1
end

local settled = settle_slot()
local o = o0 + tonumber(ARGV[8])
if ARGV[o] == '1' then
  observe_at(KEYS[2], now, o + 1)
end
if settled == 1 then
  line_wake(KEYS[#KEYS - 1], KEYS[#KEYS], now, ARGV[#ARGV])
end
return {settled}
