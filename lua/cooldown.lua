-- cooldown (contract v1): put a deployment in cooldown; a cooldown only ever extends.
--
-- KEYS: [1] cooldown key llmroute:{ns}:v1:cd:<deployment> (value: end ms; TTL: until then).
-- ARGV: [1] now ms or '', [2] duration ms from now.
-- Reply: {now, end ms of the cooldown in force}.

local now = now_ms()
return {now, extend_cooldown(KEYS[1], now, now + tonumber(ARGV[2]))}
