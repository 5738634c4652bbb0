-- leave (contract v3): take a ticket out of lines (its request gave up or was dropped while it
-- waited), waking whoever is first in a line it was first in.
--
-- KEYS: per deployment its line's two keys (llmroute:{ns}:v3:q:<scope>, ...:qx:<scope>).
-- ARGV: [1] now ms or '' (server time), [2] the ticket (16 hex digits, without its class: it
--   leaves as either), [3] the wake-up channel.
-- Reply: {0}.
-- Twin: `Engine::leave` in router-core/src/ledger/line.rs.

local now = now_ms()
local members = {ARGV[2] .. 'i', ARGV[2] .. 'b'}
for i = 1, #KEYS, 2 do
  local q, qx = KEYS[i], KEYS[i + 1]
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  local first = head == members[1] or head == members[2]
  redis.call('ZREM', qx, members[1], members[2])
  if redis.call('ZREM', q, members[1], members[2]) > 0 and first then
    line_wake(q, qx, now, ARGV[3])
  end
end
return {0}
