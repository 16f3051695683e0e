-- Compare-and-set of one endpoint's pacing record (tower-http-retry, RedisStore).
--
-- KEYS[1]  the record, a hash:
--            v  the version: an integer, changed by every write
--            s  the shared state, bytes in the crate's own format (src/pacing/store/codec.rs)
--          It expires (PEXPIRE) ARGV[3] ms after its last write; absent means open.
-- KEYS[2]  the fleet: a sorted set of the processes' holder ids, each scored by the server's
--          time (ms) of its last call, those older than 10 s dropped; it expires 10 s after
--          the last call. Its size is what a process's fallback divides an endpoint nobody
--          paced by.
-- ARGV[1]  the version the caller's new state was computed from (0: the record was absent)
-- ARGV[2]  the new state; empty: write nothing, only check that ARGV[1] is still the version
-- ARGV[3]  the record's time to live from now, ms, if written
-- ARGV[4]  the version a new record starts at (random: a record that expired and was made
--          again is not taken for the one a caller read before)
-- ARGV[5]  the calling process's holder id
--
-- Returns {1, version, '', seconds, microseconds, fleet} when the version matched (the state,
-- if any, written), or {0, version, state, seconds, microseconds, fleet} when it did not: the
-- record as it is now ({0, 0, '', ...} when absent), for the caller to apply its events to
-- again. The time is the server's (TIME), which every process maps its own clock onto; the
-- fleet, the processes that called in the last 10 s.
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZADD', KEYS[2], ms, ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms - 10000)
redis.call('PEXPIRE', KEYS[2], 10000)
local fleet = redis.call('ZCARD', KEYS[2])
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then
  return {0, v, redis.call('HGET', KEYS[1], 's') or '', now[1], now[2], fleet}
end
if ARGV[2] ~= '' then
  if v == 0 then
    v = tonumber(ARGV[4])
  else
    v = v + 1
  end
  redis.call('HSET', KEYS[1], 'v', v, 's', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, v, '', now[1], now[2], fleet}
