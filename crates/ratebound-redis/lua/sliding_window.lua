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
-- damaged, now_us, 0, 0} (a window learns nothing: see gcra.lua): the same math as the core crate's SlidingWindow, in µs; every
-- field ≥ 0 whatever the key holds. Counts above the limit (it was
-- lowered) are refused with the exact wait. A value that is not
-- "<index>:<previous>:<current>", or whose window lies more than one
-- window ahead (a redeploy lengthened the window), is damaged: rebuilt as
-- a full current window, stored, and judged as that.
-- decide(key, now, o, limit, W, n): the decision for `key` at `now` (µs),
-- as nine values; its arguments are ARGV[o + 1] … (o = 1 for a call on
-- one key: ARGV[2] …), the first three read as numbers by the tail
-- (one.lua, many.lua). At most one write, at the end (`w`).
local function decide(key, now, o, limit, W, n)
  local now_idx = math.floor(now / W)
  if now_idx * W > now then now_idx = now_idx - 1 end
  local idx, prev, cur, bad, w = now_idx, 0, 0, 0, false
  local raw = redis.pcall('GET', key)
  if raw then
    -- A string, or the error table of a key of another type (WRONGTYPE).
    local i, p, c
    if type(raw) == 'string' then i, p, c = string.match(raw, '^(%d+):(%d+):(%d+)$') end
    if i and #i <= 16 and #p <= 16 and #c <= 16 then i, p, c = i + 0, p + 0, c + 0 else i = nil end
    -- A stored window more than one ahead of now was counted in windows of
    -- another length (a redeploy lengthened the window) — or by a clock
    -- gone back by more than a window: judged as damaged (a full window,
    -- refused until it ends), never as a window decades away.
    if i and i <= now_idx + 1 and p <= 9007199254740991 and c <= 9007199254740991 then
      idx, prev, cur = i, p, c
    else
      bad, cur, w = 1, limit, true
    end
  end
  if now_idx == idx + 1 then
    idx, prev, cur = now_idx, cur, 0
  elseif now_idx > idx then
    idx, prev, cur = now_idx, 0, 0
  end
  -- A reading before the stored window (a clock that went back) is judged
  -- at the stored window's start.
  local start = idx * W
  local at = now
  if at < start then at = start end
  local e = at - start
  local lw = limit * W
  local ok, retry, taken = 1, 0, 0
  if n == 0 then
    -- A query: the state as it is.
  elseif prev * (W - e) + (cur + n) * W <= lw then
    cur = cur + n
    taken, w = n, true
  else
    -- Refused: the exact wait until the estimate leaves room for n — in
    -- this window, as the previous one slides out, or else in the next.
    ok = 0
    local wait
    if cur + n <= limit and prev > 0 then
      local q = (limit - cur - n) * W
      local k = math.floor(q / prev)
      if k * prev > q then k = k - 1 end
      if k > W then k = W end
      if k > 0 then
        local target = W - k
        if target < e then target = e end
        wait = target - e
      end
    end
    if not wait then
      local target = 0
      if cur > 0 then
        local q = (limit - n) * W
        local k = math.floor(q / cur)
        if k * cur > q then k = k - 1 end
        if k > W then k = W end
        target = W - k
      end
      wait = (W - e) + target
    end
    retry = (at - now) + wait
  end
  local reset = 0
  if cur > 0 then
    reset = (idx + 2) * W - now
  elseif prev > 0 then
    reset = (idx + 1) * W - now
  end
  if w and reset > 0 then
    redis.call('SET', key, string.format('%d:%d:%d', idx, prev, cur), 'PX', string.format('%d', math.ceil(reset / 1000)))
  end
  local room = lw - (prev * (W - e) + cur * W)
  local left = 0
  if room > 0 then
    left = math.floor(room / W)
    if left * W > room then left = left - 1 end
  end
  return ok, left, retry, reset, taken, bad, now, 0, 0
end
