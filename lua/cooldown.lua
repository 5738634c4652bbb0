-- cooldown (contract v1): put a deployment in cooldown; a cooldown only ever extends.
--
-- KEYS: [1] the deployment's window hash (llmroute:{ns}:v1:w:<deployment>), field c.
-- ARGV: [1] now ms or '', [2] duration ms from now.
-- Reply: {now, end ms of the cooldown in force}.

local now = now_ms()
local w = expire(KEYS[1], now)
return {now, extend_cooldown(KEYS[1], now, w.cd, now + tonumber(ARGV[2]))}
