-- Every runtime key and the version they are at, read at one instant.
-- KEYS[1]: the records (a hash: id -> JSON); KEYS[2]: the version.
-- Returns { version, { id, json, id, json, ... } }.
return { redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1]) }
