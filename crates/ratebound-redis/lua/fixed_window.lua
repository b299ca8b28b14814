-- ratebound: fixed window counter, one key, one round trip.
-- KEYS[1]  the counter's key; its value is "<window index>:<count>", windows
--          aligned to Redis' clock: window k is [k·W, (k+1)·W) in µs.
-- ARGV[1]  now in µs, or "" to read Redis' TIME
-- ARGV[2]  limit per window
-- ARGV[3]  W: the window in µs
-- ARGV[4]  n: requests (0: a query — admitted, nothing written)
-- ARGV[5]  mode: "check", "lease" (at least n, up to ARGV[6]) or "return"
-- ARGV[6]  with "lease": the most to take (read in that mode only)
-- Reply: {allowed, remaining, retry_after_us, reset_after_us, taken,
-- damaged, now_us, 0, 0} (a window learns nothing: the learned word's two
-- parts are always fresh, see gcra.lua), every field ≥ 0 whatever the key
-- holds.
-- A refusal writes nothing; the key expires at the window's end. A count
-- above the limit (the limit was lowered) is refused until the window
-- ends, remaining 0. A value that is not "<index>:<count>" (damaged) is
-- rebuilt as a full current window, stored, and judged as that.
-- decide(key, now, o, limit, W, n): the decision for `key` at `now` (µs),
-- as nine values; its arguments are ARGV[o + 1] … (o = 1 for a call on
-- one key: ARGV[2] …), the first three read as numbers by the tail
-- (one.lua, many.lua). At most one write, at the end (`w`).
local function decide(key, now, o, limit, W, n)
  local mode = ARGV[o + 4]
  local idx = math.floor(now / W)
  if idx * W > now then idx = idx - 1 end
  local until_end = (idx + 1) * W - now
  local count, bad, w = 0, 0, false
  local raw = redis.pcall('GET', key)
  if raw then
    -- A string, or the error table of a key of another type (WRONGTYPE).
    local i, c
    if type(raw) == 'string' then i, c = string.match(raw, '^(%d+):(%d+)$') end
    if i and #i <= 16 and #c <= 16 then i, c = i + 0, c + 0 else i = nil end
    if not (i and i <= 9007199254740991 and c <= 9007199254740991) then
      bad, count, w = 1, limit, true
    elseif i == idx then
      count = c
    end
  end
  local ok, retry, taken = 1, 0, 0
  if n == 0 then
    -- A query: the state as it is.
  elseif mode == 'return' then
    count = count - n
    if count < 0 then count = 0 end
    taken, w = n, true
  else
    local take = n
    if mode == 'lease' then
      local most, have = ARGV[o + 5] + 0, limit - count
      if have < most then most = have end
      if most > n then take = most end
    end
    if count + take > limit then
      ok, retry = 0, until_end
    else
      count = count + take
      taken, w = take, true
    end
  end
  if w then
    if count > 0 then
      redis.call('SET', key, string.format('%d:%d', idx, count), 'PX', string.format('%d', math.ceil(until_end / 1000)))
    else
      redis.call('DEL', key)
    end
  end
  local left, reset = limit - count, 0
  if left < 0 then left = 0 end
  if count > 0 then reset = until_end end
  return ok, left, retry, reset, taken, bad, now, 0, 0
end
