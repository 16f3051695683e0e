-- Reads one endpoint's pacing record (tower-http-retry, RedisStore); see swap.lua for its
-- fields and expiry.
--
-- KEYS[1]  the record
--
-- Returns {version, state, seconds, microseconds}: {0, '', ...} when the record is absent (the
-- endpoint is open), and the server's time (TIME).
local now = redis.call('TIME')
local record = redis.call('HMGET', KEYS[1], 'v', 's')
return {tonumber(record[1] or '0'), record[2] or '', now[1], now[2]}
