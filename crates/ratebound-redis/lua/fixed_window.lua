-- ratebound: fixed window counter, one key, one round trip.
-- KEYS[1]  the counter's key; its value is "<window index>:<count>", windows
--          aligned to Redis' clock: window k is [k·W, (k+1)·W) in µs.
-- ARGV[1]  now in µs, or "" to read Redis' TIME
-- ARGV[2]  limit per window
-- ARGV[3]  W: the window in µs
-- ARGV[4]  n: requests
-- ARGV[5]  mode: "check", "lease" (at least n, up to ARGV[6]) or "return"
-- ARGV[6]  with "lease": the most to take
-- Reply: {allowed, remaining, retry_after_us, reset_after_us, taken}.
-- A refusal writes nothing; the key expires at the window's end.
local now = clock(ARGV[1])
local limit = tonumber(ARGV[2])
local W = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local mode = ARGV[5]
local idx = div(now, W)
local count = 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local i, c = string.match(stored, '^(%d+):(%d+)$')
  if i and tonumber(i) == idx then count = tonumber(c) end
end
local until_end = (idx + 1) * W - now
local function store()
  if count > 0 then
    redis.call('SET', KEYS[1], string.format('%d:%d', idx, count), 'PX', math.ceil(until_end / 1000))
  else
    redis.call('DEL', KEYS[1])
  end
end
if mode == 'return' then
  count = math.max(count - n, 0)
  store()
  local reset = 0
  if count > 0 then reset = until_end end
  return {1, limit - count, 0, reset, n}
end
local take = n
if mode == 'lease' then take = math.max(n, math.min(tonumber(ARGV[6]), limit - count)) end
if count + take > limit then
  local reset = 0
  if count > 0 then reset = until_end end
  return {0, limit - count, until_end, reset, 0}
end
count = count + take
store()
return {1, limit - count, 0, until_end, take}
