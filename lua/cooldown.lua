-- cooldown (contract v3): put a deployment in cooldown; a cooldown only ever extends.
--
-- KEYS: [1] the deployment's window hash (llmroute:{ns}:v3:w:<deployment>), field c.
-- ARGV: [1] now ms or '', [2] duration ms from now (the end saturates at TIME_CAP_MS).
-- Reply: {now, end ms of the cooldown in force}.
-- Twin: `Engine::cooldown` in router-core/src/ledger/engine.rs.

local now = now_ms()
local w = expire(KEYS[1], now)
return {now, extend_cooldown(KEYS[1], now, w.cd, after(now, tonumber(ARGV[2])))}
