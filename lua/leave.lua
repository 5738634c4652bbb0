-- leave (contract v3): take a ticket out of lines (its request gave up or was dropped while it
-- waited), waking whoever is first in a line it was first in.
--
-- KEYS: per deployment its line's two keys (llmroute:{ns}:v3:q:<scope>, ...:qx:<scope>).
-- ARGV: [1] now ms or '' (server time), [2] the ticket (16 hex digits), [3] the wake-up channel.
-- Reply: {0}.
-- Twin: `Engine::leave` in router-core/src/ledger/line.rs.

local now = now_ms()
local ticket = ARGV[2]
for i = 1, #KEYS, 2 do
  local q, qx = KEYS[i], KEYS[i + 1]
  local first = redis.call('ZRANGE', q, 0, 0)[1] == ticket
  redis.call('ZREM', qx, ticket)
  if redis.call('ZREM', q, ticket) == 1 and first then
    line_wake(q, qx, now, ARGV[3])
  end
end
return {0}
