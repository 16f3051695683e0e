-- Compare-and-set of one endpoint's pacing record (tower-http-retry, RedisStore).
--
-- KEYS[1]  the record, a hash:
--            v  the version: an integer, changed by every write
--            s  the shared state, bytes in the crate's own format (src/pacing/store/codec.rs)
--          It expires (PEXPIRE) ARGV[3] ms after its last write; absent means open.
-- ARGV[1]  the version the caller's new state was computed from (0: the record was absent)
-- ARGV[2]  the new state; empty: write nothing, only check that ARGV[1] is still the version
-- ARGV[3]  the record's time to live from now, ms, if written
-- ARGV[4]  the version a new record starts at (random: a record that expired and was made
--          again is not taken for the one a caller read before)
--
-- Returns {1, version, '', seconds, microseconds} when the version matched (the state, if any,
-- written), or {0, version, state, seconds, microseconds} when it did not: the record as it is
-- now ({0, 0, '', ...} when absent), for the caller to apply its events to again. The time is
-- the server's (TIME), which every process maps its own clock onto.
local now = redis.call('TIME')
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then
  return {0, v, redis.call('HGET', KEYS[1], 's') or '', now[1], now[2]}
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
return {1, v, '', now[1], now[2]}
