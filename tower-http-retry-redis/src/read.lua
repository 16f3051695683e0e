-- Reads one endpoint's pacing record (tower-http-retry, RedisStore); see swap.lua for its
-- fields and expiry, and for the fleet's count, which this script keeps too.
--
-- KEYS[1]  the record
-- KEYS[2]  the fleet (see swap.lua)
-- ARGV[1]  the calling process's holder id
--
-- Returns {version, state, seconds, microseconds, fleet}: {0, '', ...} when the record is
-- absent (the endpoint is open), the server's time (TIME), and the processes that called in
-- the last 10 s.
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZADD', KEYS[2], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms - 10000)
redis.call('PEXPIRE', KEYS[2], 10000)
local record = redis.call('HMGET', KEYS[1], 'v', 's')
return {tonumber(record[1] or '0'), record[2] or '', now[1], now[2], redis.call('ZCARD', KEYS[2])}
