-- ratebound: fixed window counter, one key, one round trip.
-- KEYS[1]  the counter's key; its value is "<window index>:<count>", windows
--          aligned to Redis' clock: window k is [k·W, (k+1)·W) in µs.
-- ARGV[1]  now in µs, or "" to read Redis' TIME
-- ARGV[2]  limit per window
-- ARGV[3]  W: the window in µs
-- ARGV[4]  n: requests (0: a query — admitted, nothing written)
-- ARGV[5]  mode: "check", "lease" (at least n, up to ARGV[6]) or "return"
-- ARGV[6]  with "lease": the most to take
-- Reply: {allowed, remaining, retry_after_us, reset_after_us, taken,
-- damaged, now_us}, every field ≥ 0 whatever the key holds.
-- A refusal writes nothing; the key expires at the window's end. A count
-- above the limit (the limit was lowered) is refused until the window
-- ends, remaining 0. A value that is not "<index>:<count>" (damaged) is
-- rebuilt as a full current window, stored, and judged as that.
-- decide(key, now, o): the decision for `key` at `now` (µs), its arguments
-- ARGV[o + 1] … (o = 1 for a call on one key: ARGV[2] …; see one.lua, many.lua).
local function decide(key, now, o)
  local limit = tonumber(ARGV[o + 1])
  local W = tonumber(ARGV[o + 2])
  local n = tonumber(ARGV[o + 3])
  local mode = ARGV[o + 4]
  local idx = div(now, W)
  local count = 0
  local until_end = (idx + 1) * W - now
  local function store()
    if count > 0 then
      redis.call('SET', key, string.format('%d:%d', idx, count), 'PX', math.ceil(until_end / 1000))
    else
      redis.call('DEL', key)
    end
  end
  local raw, damaged = load(key)
  if raw then
    local i, c = string.match(raw, '^(%d+):(%d+)$')
    i, c = uint(i), uint(c)
    if not (i and c) then
      damaged = true
    elseif i == idx then
      count = c
    end
  end
  local bad = 0
  if damaged then
    bad = 1
    count = limit
    store()
  end
  local function remaining() return math.max(limit - count, 0) end
  local function reset()
    if count > 0 then return until_end end
    return 0
  end
  if n == 0 then
    return {1, remaining(), 0, reset(), 0, bad, now}
  end
  if mode == 'return' then
    count = math.max(count - n, 0)
    store()
    return {1, remaining(), 0, reset(), n, bad, now}
  end
  local take = n
  if mode == 'lease' then take = math.max(n, math.min(tonumber(ARGV[o + 5]), remaining())) end
  if count + take > limit then
    return {0, remaining(), until_end, reset(), 0, bad, now}
  end
  count = count + take
  store()
  return {1, remaining(), 0, until_end, take, bad, now}
end
