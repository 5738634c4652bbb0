-- Stores one runtime key over the revision its writer read, and raises the keys' version.
-- KEYS[1]: the records (a hash: id -> JSON); KEYS[2]: the version.
-- ARGV[1]: the key's id; ARGV[2]: the revision read ('' when no key had the id);
-- ARGV[3]: the record's JSON.
-- Returns the new version, or -1 when the stored key is not at the revision read.
local current = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  if current then return -1 end
else
  if not current then return -1 end
  local ok, stored = pcall(cjson.decode, current)
  if not ok or type(stored) ~= 'table' or tostring(stored['rev']) ~= ARGV[2] then
    return -1
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return redis.call('INCR', KEYS[2])
