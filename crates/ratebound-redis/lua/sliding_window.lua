-- ratebound: sliding window counter, one key, one round trip.
-- KEYS[1]  the key; its value is "<window index>:<previous count>:<current count>".
-- ARGV[1]  now in µs, or "" to read Redis' TIME
-- ARGV[2]  limit per window
-- ARGV[3]  W: the window in µs (limit · W ≤ 2^53, checked by the caller,
--          so every product below is exact in a double)
-- ARGV[4]  n: requests (0: a query — admitted, nothing written)
-- ARGV[5]  mode: "check"
-- The estimate weights the previous window's count by how much of it still
-- overlaps the sliding window: admit n iff
--   previous·(W − elapsed) + (current + n)·W ≤ limit·W.
-- Reply: {allowed, remaining, retry_after_us, reset_after_us, taken,
-- damaged, now_us}: the same math as the core crate's SlidingWindow, in µs; every
-- field ≥ 0 whatever the key holds. Counts above the limit (it was
-- lowered) are refused with the exact wait. A value that is not
-- "<index>:<previous>:<current>" (damaged) is rebuilt as a full current
-- window, stored, and judged as that.
-- decide(key, now, o): the decision for `key` at `now` (µs), its arguments
-- ARGV[o + 1] … (o = 1 for a call on one key: ARGV[2] …; see one.lua, many.lua).
local function decide(key, now, o)
  local limit = tonumber(ARGV[o + 1])
  local W = tonumber(ARGV[o + 2])
  local n = tonumber(ARGV[o + 3])
  local now_idx = div(now, W)
  local idx, prev, cur = now_idx, 0, 0
  local raw, damaged = load(key)
  if raw then
    local i, p, c = string.match(raw, '^(%d+):(%d+):(%d+)$')
    i, p, c = uint(i), uint(p), uint(c)
    if i and p and c then idx, prev, cur = i, p, c else damaged = true end
  end
  local bad = 0
  if damaged then
    bad = 1
    idx, prev, cur = now_idx, 0, limit
  end
  if now_idx == idx + 1 then
    idx, prev, cur = now_idx, cur, 0
  elseif now_idx > idx then
    idx, prev, cur = now_idx, 0, 0
  end
  -- A reading before the stored window (a clock that went back) is judged
  -- at the stored window's start.
  local at = math.max(now, idx * W)
  local e = at - idx * W
  local function used(current) return prev * (W - e) + current * W end
  local function reset_after(current)
    if current > 0 then return (idx + 2) * W - now end
    if prev > 0 then return (idx + 1) * W - now end
    return 0
  end
  local function remaining(current)
    return div(math.max(limit * W - used(current), 0), W)
  end
  local function store()
    local reset = reset_after(cur)
    if reset > 0 then
      redis.call('SET', key, string.format('%d:%d:%d', idx, prev, cur), 'PX', math.ceil(reset / 1000))
    end
    return reset
  end
  if damaged then store() end
  if n == 0 then
    return {1, remaining(cur), 0, reset_after(cur), 0, bad, now}
  end
  if used(cur + n) <= limit * W then
    cur = cur + n
    return {1, remaining(cur), 0, store(), n, bad, now}
  end
  -- Refused: the exact wait until the estimate leaves room for n.
  local function wait()
    if cur + n <= limit and prev > 0 then
      local target = W - math.min(div((limit - cur - n) * W, prev), W)
      if target < W then return math.max(target, e) - e end
    end
    local target = 0
    if cur > 0 then target = W - math.min(div((limit - n) * W, cur), W) end
    return (W - e) + target
  end
  return {0, remaining(cur), (at - now) + wait(), reset_after(cur), 0, bad, now}
end
