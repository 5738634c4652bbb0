-- observe (contract v3): follow a provider that reports less remaining than the ledger believes.
--
-- KEYS: [1] the deployment's window hash.
-- ARGV: [1] now ms or '', [2] rpm, [3] tpm, [4] itpm, [5] otpm limits (0 = unlimited), then
--   remaining (-1 = not reported) and reset ms from now of: [6..7] requests, [8..9] tokens,
--   [10..11] input tokens, [12..13] output tokens. Each is followed against its own limit.
-- Less remaining than limit - used (for a dimension we limit): the difference is counted in the
--   live bucket that leaves the window first at or after the reset. Nothing remaining in a
--   dimension we do not limit: cooldown until the reset.
-- Also stores the report itself in the hash (qr, qt, qi, qx, qa) for snapshots.
-- Resets saturate at TIME_CAP_MS.
-- Reply: {1}.
-- Twin: `Engine::observe` in router-core/src/ledger/engine.rs.

local now = now_ms()
local nb = math.floor(now / BUCKET_MS)
local key = KEYS[1]
local w = expire(key, now)
-- Remember what the provider said (qr, qt, qi, qx: remaining requests, tokens, input and
-- output tokens, -1 when not reported; qa: when), for `llmroute quota`.
if tonumber(ARGV[6]) >= 0 or tonumber(ARGV[8]) >= 0 or tonumber(ARGV[10]) >= 0
    or tonumber(ARGV[12]) >= 0 then
  redis.call('HSET', key, 'qr', ARGV[6], 'qt', ARGV[8], 'qi', ARGV[10], 'qx', ARGV[12], 'qa', now)
  keep_window(key, w, now)
end
local function follow(remaining, reset_ms, limit, used, prefix, total)
  if remaining < 0 then
    return
  end
  local reset_at = after(now, reset_ms)
  if limit <= 0 then
    -- A dimension we do not limit: only "nothing left" is actionable.
    if remaining == 0 then
      w.cd = extend_cooldown(key, now, w.cd, reset_at)
    end
    return
  end
  -- Less left than we believe (nothing left included): count the difference as used until the
  -- provider's reset. A deployment we filled ourselves is left as it is.
  local believed = math.max(0, limit - used)
  if remaining >= believed then
    return
  end
  local k = math.ceil(reset_at / BUCKET_MS) - (SPAN + 1)
  k = math.min(math.max(k, nb - SPAN), nb)
  if not is_live(w, k) then
    k = w.b
  end
  redis.call('HINCRBY', key, prefix .. k, believed - remaining)
  redis.call('HINCRBY', key, total, believed - remaining)
  redis.call('HSET', key, 'o', w.o, 'h', LAYOUT_NOTE)
  keep_window(key, w, now)
end
follow(tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[2]), w.R, 'r', 'R')
follow(tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[3]), w.T, 't', 'T')
follow(tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[4]), w.I, 'i', 'I')
follow(tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[5]), w.X, 'x', 'X')
return {1}
