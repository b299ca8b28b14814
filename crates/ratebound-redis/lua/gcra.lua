-- ratebound: GCRA token bucket, one key, one round trip.
-- KEYS[1]  the bucket's key; its value is the theoretical arrival time (TAT)
--          in integer microseconds of Redis' own clock (TIME).
-- ARGV[1]  now in µs, or "" to read Redis' TIME (see clock() in prelude.lua;
--          production calls pass "").
-- ARGV[2]  T: the emission interval in µs (1/rate, rounded up)
-- ARGV[3]  tau: the tolerance in µs (burst · T)
-- ARGV[4]  n: tokens
-- ARGV[5]  mode: "check" (take n or nothing), "lease" (take at least n and
--          up to ARGV[6] if there), "return" (give n back)
-- ARGV[6]  with "lease": the most to take
-- Reply: {allowed (0/1), remaining, retry_after_us, reset_after_us, taken}.
-- A refusal writes nothing. The key expires when the bucket is full again
-- (PX rounded up), so forgetting it changes no decision.
local now = clock(ARGV[1])
local T = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local mode = ARGV[5]
local stored = redis.call('GET', KEYS[1])
local tat = now
if stored then tat = math.max(tonumber(stored), now) end
local function store(value)
  if value > now then
    redis.call('SET', KEYS[1], string.format('%d', value), 'PX', math.ceil((value - now) / 1000))
  else
    redis.call('DEL', KEYS[1])
  end
end
if mode == 'return' then
  local back = math.max(tat - n * T, now)
  store(back)
  return {1, div(now + tau - back, T), 0, back - now, n}
end
local take = n
if mode == 'lease' then
  take = math.max(n, math.min(tonumber(ARGV[6]), div(now + tau - tat, T)))
end
local new_tat = tat + take * T
if new_tat - tau > now then
  return {0, div(now + tau - tat, T), new_tat - tau - now, tat - now, 0}
end
store(new_tat)
return {1, div(now + tau - new_tat, T), 0, new_tat - now, take}
