-- heartbeat (contract v3): an instance says it is alive, learns how many instances share the
-- limits and which epoch the store is in, and reads what it needs to run on its own share of
-- every limit should the store stop answering (see router-core/src/ledger/resilient.rs).
--
-- It also carries what this instance's leased blocks owe the shared windows (as unlease.lua
-- does, one correction per block and bucket, each optionally with the provider's latest report
-- on its deployment, followed once every correction is in), so that a lease's correction costs
-- no call of its own. They are applied only when the store is in the epoch the instance knows
-- (windows of another epoch never held the blocks), and once per sequence number: a beat whose
-- reply was lost is sent again with the same corrections and number, and must not give back
-- twice.
--
-- It also keeps the rejoin hash (see common.lua): an instance that admitted on its own while
-- the store did not answer it says so (ARGV[8]) with every beat until it has written that back;
-- every beat of an instance that holds nothing unwritten says that. The reply says how many
-- others an instance back from an outage still waits for.
--
-- Readings are numbered (the reads hash): an instance that will start local mode from this
-- beat's window totals has the reading recorded under the next number, and learns the oldest
-- number any live instance's last recorded reading has. An admission counted before that
-- reading is in every live instance's; one counted after it is in some only, so each instance
-- counts in full what it admitted since then (router-core/src/ledger/resilient.rs, `Reads`).
--
-- KEYS: [1] the instances zset (llmroute:{ns}:v3:instances: member = instance id, score = when
--   its registration expires, ms; a registration is kept a day after it lapses, for the rejoin
--   hash), [2] the epoch key (llmroute:{ns}:v3:epoch), [3] the rejoin hash
--   (llmroute:{ns}:v3:rejoins), [4] the reads hash (llmroute:{ns}:v3:reads: field '#' = the
--   last reading's number, and per instance id the number of its last recorded reading), then
--   the window
--   hash of each of the n scopes, then per tenant its window hash and spend hash, then the
--   slots zset of each scope, then that of each tenant, then the window hashes the corrections
--   name, then (with corrections) the instance's last applied
--   sequence number (llmroute:{ns}:v3:cs:{instance}).
-- ARGV: [1] now ms or '', [2] this instance's id, [3] how long its registration lasts (ms),
--   [4] n, the number of scopes, [5] the number of tenants, [6] the epoch this instance knows
--   ('' none: no correction is applied), [7] the corrections' sequence number (above every one
--   this instance sent before), [8] 1 when this instance holds admissions made while the store
--   did not answer it, not yet written back, else 0, [9] 1 when this instance takes this beat's
--   totals as what its local mode would start from (recorded only when the store is in the
--   epoch it knows) else 0, [10] c, the number of corrections, then per correction:
--   the index in KEYS of its first window hash, how many follow it (the deployment's, then the
--   provider's when limited provider-wide), the bucket, the request, token, input and output
--   token corrections, 1 when a report follows (what observe.lua takes from its ARGV[2] on, 12
--   values) else 0.
-- The epoch is a number restore.lua stores when it finds none: a store that lost its keys (a
--   restarted Redis without persistence) has no epoch, and every instance then knows the
--   windows it sees are not the whole story. Its TTL (EPOCH_TTL_MS) is refreshed here.
-- Reply: {live instances (this one included), epoch (0: none), the current UTC day and month
--   (budget periods, see common.lua), 1 when the corrections were applied else 0, how many other
--   instances this one waits for (see the rejoin hash), this reading's number (0: not
--   recorded), the oldest number among the live instances' last recorded readings, this one's
--   included (0: none), then per scope R, T, I, X (its window totals, the corrections in), the ms left of its cooldown (0:
--   none; a cooldown put by another instance ends this one's block there) and its live slots
--   (requests in flight, every instance's), then per tenant R, T, I, X, spent today, spent
--   this month (micro-USD) and its live slots}.

local now = now_ms()
local ttl, n, tenants = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local me, rejoin = ARGV[2], KEYS[3]
redis.call('ZADD', KEYS[1], fmt('%d', now + ttl), me)
-- Registrations lapsed a day ago are forgotten, with what the rejoin hash held of them.
local forgotten = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt('%d', now - EPOCH_TTL_MS))
for _, id in ipairs(forgotten) do
  redis.call('HDEL', rejoin, 'a:' .. id, 'c:' .. id, 's:' .. id)
  redis.call('ZREM', KEYS[1], id)
end
redis.call('PEXPIRE', KEYS[1], EPOCH_TTL_MS + ttl)
local live = redis.call('ZCOUNT', KEYS[1], fmt('(%d', now), '+inf')
if ARGV[8] == '1' then
  local v = redis.call('HMGET', rejoin, 'a:' .. me, 'c:' .. me)
  local last_away, clean = tonumber(v[1]), tonumber(v[2]) or 0
  if last_away == nil or clean >= last_away then
    -- Its first such word since it last held nothing: its outage began after that.
    redis.call('HSET', rejoin, 's:' .. me, fmt('%d', clean))
  end
  redis.call('HSET', rejoin, 'a:' .. me, fmt('%d', now))
else
  redis.call('HSET', rejoin, 'c:' .. me, fmt('%d', now))
end
redis.call('HSET', rejoin, 'g', fmt('%d', ttl))
redis.call('PEXPIRE', rejoin, EPOCH_TTL_MS)
local waiting = rejoin_waiting(rejoin, KEYS[1], me, now)
local epoch = tonumber(redis.call('GET', KEYS[2])) or 0
if epoch ~= 0 then
  redis.call('PEXPIRE', KEYS[2], EPOCH_TTL_MS)
end
local applied = 0
local c = tonumber(ARGV[10])
if ARGV[6] ~= '' and tonumber(ARGV[6]) == epoch then
  applied = 1
end
local seq_key = KEYS[#KEYS]
if applied == 1 and c > 0 and tonumber(ARGV[7]) > (tonumber(redis.call('GET', seq_key)) or 0) then
  redis.call('SET', seq_key, ARGV[7], 'PX', EPOCH_TTL_MS)
  local a, reports = 11, {}
  for _ = 1, c do
    local first, count, bucket = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local dr, dt, di, dx = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]),
      tonumber(ARGV[a + 6])
    for k = first, first + count - 1 do
      local w = expire(KEYS[k], now)
      correct(KEYS[k], w, bucket, dr, dt, di, dx, now)
    end
    if ARGV[a + 7] == '1' then
      reports[#reports + 1] = {first, a + 8}
      a = a + 8 + 12
    else
      a = a + 8
    end
  end
  -- Reports last, against the windows with every correction in: a request moved to a later
  -- second is added there and taken off its grant's second by two corrections, and a report
  -- read between them would find the windows short by it and count the difference again.
  for _, r in ipairs(reports) do
    observe_at(KEYS[r[1]], now, r[2])
  end
end
local reads, read, oldest = KEYS[4], 0, 0
if ARGV[9] == '1' and applied == 1 then
  read = redis.call('HINCRBY', reads, '#', 1)
  redis.call('HSET', reads, ARGV[2], read)
  redis.call('PEXPIRE', reads, EPOCH_TTL_MS)
end
local recorded = redis.call('HGETALL', reads)
for i = 1, #recorded, 2 do
  local id, number = recorded[i], tonumber(recorded[i + 1])
  if id ~= '#' then
    if not is_live_instance(KEYS[1], id, now) then
      redis.call('HDEL', reads, id)
    elseif oldest == 0 or number < oldest then
      oldest = number
    end
  end
end
local p = periods(now)
local out = {live, epoch, p.day, p.month, applied, waiting, read, oldest}
local slots, after_now = 4 + n + 2 * tenants, fmt('(%d', now)
for s = 1, n do
  local w = expire(KEYS[4 + s], now)
  out[#out + 1] = w.R
  out[#out + 1] = w.T
  out[#out + 1] = w.I
  out[#out + 1] = w.X
  out[#out + 1] = math.max(w.cd - now, 0)
  out[#out + 1] = redis.call('ZCOUNT', KEYS[slots + s], after_now, '+inf')
end
for t = 1, tenants do
  local k = 4 + n + 2 * (t - 1)
  local w = expire(KEYS[k + 1], now)
  local day, month = spent(KEYS[k + 2], p)
  out[#out + 1] = w.R
  out[#out + 1] = w.T
  out[#out + 1] = w.I
  out[#out + 1] = w.X
  out[#out + 1] = day
  out[#out + 1] = month
  out[#out + 1] = redis.call('ZCOUNT', KEYS[slots + n + t], after_now, '+inf')
end
return out
