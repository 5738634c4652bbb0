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
-- The work is `observe_at` in common.lua, which settle.lua also runs.
-- Reply: {1}.
-- Twin: `Engine::observe` in router-core/src/ledger/engine.rs.

local now = now_ms()
observe_at(KEYS[1], now, 2)
return {1}
