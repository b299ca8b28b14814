-- ratebound: GCRA token bucket, one key, one round trip.
-- KEYS[1]  the bucket's key; its value is the theoretical arrival time (TAT)
--          in integer microseconds of Redis' own clock (TIME), and while a
--          pause is on, ":" and the pause's end: "<TAT>" or "<TAT>:<end>".
-- ARGV[1]  now in µs, or "" to read Redis' TIME (see clock() in prelude.lua;
--          production calls pass "").
-- ARGV[2]  T: the emission interval in µs (1/rate, rounded up)
-- ARGV[3]  tau: the tolerance in µs (burst · T)
-- ARGV[4]  n: tokens (0: a query — admitted, nothing written)
-- ARGV[5]  mode: "check" (take n or nothing), "lease" (take at least n and
--          up to ARGV[6] if there), "return" (give n back, never below the
--          present), "reserve" (take n even if they arrive in the future,
--          if within ARGV[6] µs), "pause" (empty until now + ARGV[6] µs)
-- ARGV[6]  with "lease": the most to take; "reserve": the longest wait in
--          µs; "pause": how long in µs
-- Reply: {allowed (0/1), remaining, retry_after_us, reset_after_us, taken,
-- damaged (0/1), now_us (the clock the script judged at)}, every field ≥ 0
-- whatever the key holds. A reservation's retry_after is the wait until its
-- tokens are due (allowed = 1: they are taken); beyond the longest wait it
-- is the wait it would need (allowed = 0: nothing taken). A pause replies
-- in retry_after the shift δ it gave every slot from max(now, the last
-- pause's end) on (0: an earlier pause already covers it).
-- A refusal writes nothing. The key expires when the bucket is full again
-- (PX rounded up), so forgetting it changes no decision.
-- A TAT more than tau ahead (the burst was lowered, reservations, a pause)
-- is a bucket with fewer than 0 tokens: refused with the exact wait,
-- remaining 0. A value that is not a TAT (damaged) is rebuilt as an empty
-- bucket — TAT = now + tau, stored — and judged as that: conservative,
-- never admitting more than the limit, and that key's problem alone.
-- decide(key, now, o): the decision for `key` at `now` (µs), its arguments
-- ARGV[o + 1] … (o = 1 for a call on one key: ARGV[2] …; see one.lua, many.lua).
local function decide(key, now, o)
  local T = tonumber(ARGV[o + 1])
  local tau = tonumber(ARGV[o + 2])
  local n = tonumber(ARGV[o + 3])
  local mode = ARGV[o + 4]
  local paused = 0
  local function store(value)
    if value > now then
      local text = string.format('%d', value)
      if paused > now then text = text .. string.format(':%d', paused) end
      redis.call('SET', key, text, 'PX', math.ceil((value - now) / 1000))
    else
      redis.call('DEL', key)
    end
  end
  local raw, damaged = load(key)
  local tat = now
  if raw then
    local a, b = string.match(raw, '^(%d+):(%d+)$')
    local v, p
    if a then v, p = uint(a), uint(b) else v, p = uint(raw), 0 end
    if v and p then
      tat, paused = math.max(v, now), p
    else
      damaged = true
    end
  end
  local bad = 0
  if damaged then
    bad = 1
    tat = now + tau
    store(tat)
  end
  local function tokens(at) return div(math.max(now + tau - at, 0), T) end
  if n == 0 and mode ~= 'pause' then
    return {1, tokens(tat), 0, tat - now, 0, bad, now}
  end
  if mode == 'return' then
    -- Never below the present, nor into a pause that is on.
    local floor = now
    if paused > now then floor = paused + tau end
    local back = math.max(tat - n * T, floor)
    store(back)
    return {1, tokens(back), 0, back - now, n, bad, now}
  end
  if mode == 'pause' then
    -- Every slot from `start` on (the reservations waiting there, and the
    -- bucket's refill) moves δ later, in its order: the bucket is empty
    -- until `last`. A pause that ends no later than one already on changes
    -- nothing, so every instance obeying one Retry-After pauses once.
    local last = now + tonumber(ARGV[o + 5])
    local start = math.max(now, paused)
    local shift = 0
    if last > start then
      shift = last - start
      paused = last
      tat = math.max(tat, start + tau) + shift
      store(tat)
    end
    return {1, tokens(tat), shift, tat - now, 0, bad, now}
  end
  local take = n
  if mode == 'lease' then
    take = math.max(n, math.min(tonumber(ARGV[o + 5]), tokens(tat)))
  end
  local new_tat = tat + take * T
  local wait = new_tat - tau - now
  if mode == 'reserve' then
    wait = math.max(wait, 0)
    if wait > tonumber(ARGV[o + 5]) then
      return {0, tokens(tat), wait, tat - now, 0, bad, now}
    end
    store(new_tat)
    return {1, tokens(new_tat), wait, new_tat - now, take, bad, now}
  end
  if wait > 0 then
    return {0, tokens(tat), wait, tat - now, 0, bad, now}
  end
  store(new_tat)
  return {1, tokens(new_tat), 0, new_tat - now, take, bad, now}
end
