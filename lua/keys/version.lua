-- The runtime keys' version. KEYS[1]: the version.
return redis.call('GET', KEYS[1]) or '0'
