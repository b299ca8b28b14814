-- ratebound: GCRA token bucket, one key, one round trip.
-- KEYS[1]  the bucket's key; its value is the theoretical arrival time (TAT)
--          in integer microseconds of Redis' own clock (TIME).
-- ARGV[1]  now in µs, or "" to read Redis' TIME (see clock() in prelude.lua;
--          production calls pass "").
-- ARGV[2]  T: the emission interval in µs (1/rate, rounded up)
-- ARGV[3]  tau: the tolerance in µs (burst · T)
-- ARGV[4]  n: tokens (0: a query — admitted, nothing written)
-- ARGV[5]  mode: "check" (take n or nothing), "lease" (take at least n and
--          up to ARGV[6] if there), "return" (give n back)
-- ARGV[6]  with "lease": the most to take
-- Reply: {allowed (0/1), remaining, retry_after_us, reset_after_us, taken,
-- damaged (0/1)}, every field ≥ 0 whatever the key holds.
-- A refusal writes nothing. The key expires when the bucket is full again
-- (PX rounded up), so forgetting it changes no decision.
-- A TAT more than tau ahead (the burst was lowered, or a pause) is a
-- bucket with fewer than 0 tokens: refused with the exact wait, remaining 0.
-- A value that is not a TAT (damaged) is rebuilt as an empty bucket — TAT
-- = now + tau, stored — and judged as that: conservative, never admitting
-- more than the limit, and that key's problem alone.
local now = clock(ARGV[1])
local T = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local mode = ARGV[5]
local function store(value)
  if value > now then
    redis.call('SET', KEYS[1], string.format('%d', value), 'PX', math.ceil((value - now) / 1000))
  else
    redis.call('DEL', KEYS[1])
  end
end
local raw, damaged = load(KEYS[1])
local tat = now
if raw then
  local v = uint(raw)
  if v then tat = math.max(v, now) else damaged = true end
end
local bad = 0
if damaged then
  bad = 1
  tat = now + tau
  store(tat)
end
local function tokens(at) return div(math.max(now + tau - at, 0), T) end
if n == 0 then
  return {1, tokens(tat), 0, tat - now, 0, bad}
end
if mode == 'return' then
  local back = math.max(tat - n * T, now)
  store(back)
  return {1, tokens(back), 0, back - now, n, bad}
end
local take = n
if mode == 'lease' then
  take = math.max(n, math.min(tonumber(ARGV[6]), tokens(tat)))
end
local new_tat = tat + take * T
if new_tat - tau > now then
  return {0, tokens(tat), new_tat - tau - now, tat - now, 0, bad}
end
store(new_tat)
return {1, tokens(new_tat), 0, new_tat - now, take, bad}
