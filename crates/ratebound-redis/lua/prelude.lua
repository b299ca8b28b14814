-- ratebound: what every script starts with (the engine prepends this file
-- to each script; the SHA covers the whole text).
-- Cost (benches/redis/script_cost.py): everything here runs on every call,
-- so it holds no helper functions — each `local function` is a closure
-- allocated per run, and so is each upvalue one captures (string.format
-- and the like are read as globals for that reason) — and no string
-- conversion a call does not need. A number argument is read with `s + 0`
-- (one strtod; `tonumber` runs two, through a C call); a number is written
-- with string.format('%d'), exact for every integer below 2^53 (tostring
-- would print 2^53 as "9.007199254741e+15", and a number handed to
-- redis.call is formatted by Redis with '%.17g', slower).
-- now: in integer µs — ARGV[1] when a caller judges at an explicit time
-- (the test vectors' twin of TIME), else Redis' own TIME (frozen for the
-- script's run: read once, whatever the number of keys).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = ARGV[1] + 0
end
-- A stored number is valid when it is a whole number from 0 to 2^53 - 1
-- written in decimal digits only, at most 16 of them; else the key is
-- damaged ('', '-5', '1e300', 'nan', '0x10', ' 12' and 2^63 are: tonumber
-- alone accepts several of them). Each algorithm matches its format with
-- `%d+` captures (digits only), then checks each capture's length and
-- value.
-- Exact floor division of non-negative integers a, b (each product below
-- 2^53): q = floor(a / b), then q - 1 if q * b > a (a double division can
-- round up to the next integer, never down past one), written out where
-- it is needed.
