-- days (contract v3): what day hashes hold of given days (see common.lua's day hash), for a
-- heartbeat to remember: should the store lose its keys, restore.lua writes them back.
--
-- KEYS: day hashes (llmroute:{ns}:v3:y:<scope> and ...:y:t:<account>).
-- ARGV: [1] now ms or '' (unused), then per key the day asked about (its id).
-- Reply: per key, the requests and tokens counted in that day (0 and 0 when it holds another).

local out = {}
for i = 1, #KEYS do
  local r, t = day_counted(KEYS[i], tonumber(ARGV[i + 1]))
  out[#out + 1] = r
  out[#out + 1] = t
end
return out
