-- lease (contract v3): grant an instance a block of a deployment's limits (n requests and t
-- tokens), counted in the shared windows at once, so that it admits from the block without
-- calling Redis until the block is used up or expires; what it does not use goes back through
-- unlease.lua. Leased and shared admissions together stay within every limit in every window.
--
-- KEYS: the deployment's window hash, then, when its provider has provider-wide limits, the
--   provider's window hash.
-- ARGV: [1] now ms or '', [2] requests wanted, [3] tokens wanted, [4] the fewest requests and
--   [5] the fewest tokens worth a lease (less room than that: nothing is granted), [6] parts p:
--   the block takes at most 1/p of the room left (never less than the fewest), so blocks shrink
--   as a deployment fills and the last of its room goes a request at a time, [7] number of
--   scopes s (1 or 2), then per scope its rpm, tpm, itpm and otpm (0 = unlimited), then 1 when
--   the deployment counts input and output tokens apart (it or its provider limits either),
--   else 0, then the number of corrections c of the instance's earlier blocks on this
--   deployment, and c times a bucket and its request, token, input and output token corrections
--   (as unlease.lua takes them), applied first: the block that ended and the one that starts
--   cost one call.
-- The block's tokens count against tpm, itpm and otpm alike (the instance does not know yet
--   how its requests split into input and output), so an unused part is returned in full; a
--   deployment that does not count input and output apart gets no input or output counted.
-- A deployment in cooldown grants nothing.
-- Last of all: KEYS ends with the call's record (see common.lua: a call run again answers as
--   it did the first time, and changes nothing) and the epoch key, and ARGV with the epoch the
--   instance knows ('' to skip the check), as in admit.lua.
-- Reply: granted {1, now, requests, tokens, bucket, room}; refused {0, now, cooldown end (0:
--   none), room}, where room is the requests and tokens left after it (-1: unlimited); {2, now}
--   when the stored epoch is not the instance's (see admit.lua; nothing applied, nothing kept).

local now = now_ms()
if ARGV[#ARGV] ~= '' and redis.call('GET', KEYS[#KEYS]) ~= ARGV[#ARGV] then
  return {2, now}
end
-- The epoch first: a reply of another epoch's windows is never answered again.
local call = KEYS[#KEYS - 1]
local earlier = replayed(call)
if earlier then
  return earlier
end
local want_r, want_t = tonumber(ARGV[2]), tonumber(ARGV[3])
local min_r, min_t = tonumber(ARGV[4]), tonumber(ARGV[5])
local parts = tonumber(ARGV[6])
local s = tonumber(ARGV[7])
local apart = ARGV[8 + 4 * s] == '1'
local c0 = 9 + 4 * s
for c = 1, tonumber(ARGV[c0]) do
  local a = c0 + 5 * (c - 1)
  local bucket = tonumber(ARGV[a + 1])
  for i = 1, s do
    local w = expire(KEYS[i], now)
    correct(KEYS[i], w, bucket, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
      tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), now)
  end
end
-- The room left in every scope: requests and tokens (nil: unlimited).
local ws, room_r, room_t = {}, nil, nil
local function least(a, b)
  if a == nil or b < a then
    return b
  end
  return a
end
for i = 1, s do
  local w = expire(KEYS[i], now)
  ws[i] = w
  local a = 7 + 4 * (i - 1)
  local rpm, tpm, itpm, otpm = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  if rpm > 0 then
    room_r = least(room_r, rpm - w.R)
  end
  if tpm > 0 then
    room_t = least(room_t, tpm - w.T)
  end
  if itpm > 0 then
    room_t = least(room_t, itpm - w.I)
  end
  if otpm > 0 then
    room_t = least(room_t, otpm - w.X)
  end
end
local function reply_room(room, taken)
  if room == nil then
    return -1
  end
  return math.max(room - taken, 0)
end
if ws[1].cd > now then
  return remembered(call, {0, now, ws[1].cd, 0, 0})
end
if (room_r ~= nil and room_r < min_r) or (room_t ~= nil and room_t < min_t) then
  return remembered(call, {0, now, 0, reply_room(room_r, 0), reply_room(room_t, 0)})
end
if room_r ~= nil then
  want_r = math.min(want_r, math.max(min_r, math.floor(room_r / parts)))
end
if room_t ~= nil then
  want_t = math.min(want_t, math.max(min_t, math.floor(room_t / parts)))
end
for i = 1, s do
  local w = ws[i]
  local split = apart and want_t or 0
  adjust(KEYS[i], w, w.b, want_r, want_t, split, split, now)
end
return remembered(call,
  {1, now, want_r, want_t, ws[1].b, reply_room(room_r, want_r), reply_room(room_t, want_t)})
