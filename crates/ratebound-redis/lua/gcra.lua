-- ratebound: GCRA token bucket, one key, one round trip.
-- KEYS[1]  the bucket's key; its value is the theoretical arrival time (TAT)
--          in integer microseconds of Redis' own clock (TIME), and while a
--          pause is on, ":" and the pause's end: "<TAT>" or "<TAT>:<end>";
--          once the fleet has learned something of a partner's limit, the
--          learned word after them: "<TAT>:<hi>:<lo>" or
--          "<TAT>:<end>:<hi>:<lo>" (below).
-- ARGV[1]  now in µs, or "" to read Redis' TIME (see prelude.lua;
--          production calls pass "").
-- ARGV[2]  T: the emission interval in µs (1/rate, rounded up) — the
--          ceiling's
-- ARGV[3]  tau: the tolerance in µs (burst · T) — the ceiling's
-- ARGV[4]  n: tokens (0: a query — admitted, nothing written)
-- ARGV[5]  mode: "check" (take n or nothing), "lease" (take at least n and
--          up to ARGV[6] if there), "return" (give back the n a taking
--          that left the TAT at ARGV[6] took, if nothing was built on
--          them since), "reserve" (take n even if they arrive in the
--          future, if within ARGV[6] µs), "pause" (empty until now +
--          ARGV[6] µs), "resume" (lift the pause on, if nothing was built
--          on it), "adapt" (replace the learned word ARGV[6] names as seen
--          by the one it names as next, if it is still the one seen)
-- ARGV[6]  with "lease": the most to take; "return": the TAT the taking
--          left (the end of its slot, µs: now_us + reset_after_us of its
--          reply); "reserve": the longest wait in µs; "pause": how long in
--          µs; "adapt": "<seen hi>:<seen lo>:<next hi>:<next lo>" (read in
--          those modes only)
-- ARGV[7]  optional, a hint (Engine::call, for a key whose last reply told
--          a learned word): that word's text as stored, ":<hi>:<lo>";
--          ARGV[2] and ARGV[3] are then the word's T' and tau' (the
--          scaling below, done by the engine in integers: the same
--          numbers) and ARGV[8] the ceiling's "<T>:<tau>". A key holding
--          "<TAT>" then exactly the hint is judged on T' and tau' without
--          reading the word nor scaling, and the reply's word is 262144, 0
--          ("as hinted", beyond hi's 18 bits); any other key is judged on
--          the ceiling by the full path. Not read in "adapt".
-- Reply: {allowed (0/1), remaining, retry_after_us, reset_after_us, taken,
-- damaged (0/1), now_us (the clock the script judged at), word_hi,
-- word_lo (the learned word in force once the call is done; 0, 0: fresh)},
-- every field ≥ 0 whatever the key holds. A reservation's retry_after is the wait until its
-- tokens are due (allowed = 1: they are taken); beyond the longest wait it
-- is the wait it would need (allowed = 0: nothing taken). A pause replies
-- in retry_after the shift δ it gave every slot from max(now, the last
-- pause's end) on (0: an earlier pause already covers it). A return
-- replies taken = n if it gave the tokens back, 0 if it gave nothing.
-- A resume replies allowed = 1, taken = 1 if it lifted the pause (the TAT
-- was exactly what the pauses left, end + tau: no reservation made behind
-- the pause or moved by it; the TAT becomes now + tau — empty now,
-- refilling from now — and the end is dropped); allowed = 1, taken = 0 if
-- no pause was on; allowed = 0 and retry_after = the time left until the
-- pause's end if reservations stand behind it (nothing written). An adapt
-- replies allowed = 1 if it replaced the word, 0 if the word was another
-- (nothing written), with the word in force after it; one that lowers the
-- share drops the queue beyond an empty bucket at the new rate (the TAT is
-- at most max(now, the pause's end) + tau'), as TokenBucket::adapt does.
-- The learned word (ratebound::outbound::Learned, what the outbound
-- adapters learn of a partner's real limit) is a u64 of 62 bits, beyond a
-- double's 53: it is kept as two numbers, hi = word >> 44 (the cut bit,
-- then FULL − fraction in 65536ths of the ceiling: 0 to 65536) and lo =
-- word & (2^44 − 1) (the change instant, ms). While hi's fraction is
-- below the whole (hi % 2^17 > 0), the bucket runs at the ceiling scaled
-- as Learned::scale scales it, in µs: f = max(1, 65536 − hi % 2^17),
-- T' = min(ceil(T · 65536 / f), ceil(2^60 / 1000)), b = tau / T,
-- b' = max(1, min(floor(b · f / 65536), floor(floor(2^60 / 1000) / T'))),
-- tau' = b' · T' (the same numbers as Learned::scale of the ceiling with
-- T in whole µs, rounded up to µs; its burst bound, 2^60 ns over the
-- period, is the script's only where b' · T' would pass 36 years, and
-- there the script's burst is the smaller). A fresh word (hi = lo = 0)
-- is stored as no word at all: a fleet that learned nothing pays nothing.
-- A key holding a learned word lives at least tau' after each write (the
-- time its bucket takes to fill at the learned rate), so an adapt on a
-- full bucket is kept; idle that long, the key expires with the word: the
-- fleet is back at the ceiling and learns again from the partner's next
-- refusals.
-- Give-backs: the slots [end − n·T, end) of the takings still held never
-- overlap and all end at or before the TAT (a taking starts at max(TAT,
-- now); a pause moves the ones from its start on, in their order, and the
-- TAT with them). So a TAT still equal to a taking's end means its slot is
-- the last: nobody has built on it, and the TAT goes back to the slot's
-- start (never below the present, nor into a pause that is on) — as if it
-- had never been taken. Any other TAT (a later taking, a pause since, a
-- give-back of a slot before it) keeps its value: moving it back would put
-- new slots under ones still held and let the queue exceed burst + rate·t.
-- Those tokens are lost instead. Cancels in the reverse order of the
-- takings chain: each finds its own end again once the later are back.
-- A refusal writes nothing. The key expires when the bucket is full again
-- (PX rounded up), so forgetting it changes no decision.
-- A TAT more than tau ahead (the burst was lowered, reservations, a pause)
-- is a bucket with fewer than 0 tokens: refused with the exact wait,
-- remaining 0. A value that is not a TAT (damaged: a learned word out of
-- its bounds too) is rebuilt as an empty bucket at the ceiling, the word
-- fresh — TAT = now + tau, stored — and judged as that: conservative
-- (never admitting more than the ceiling), and that key's problem alone.
-- decide(key, now, o, T, tau, n, h): the decision for `key` at `now` (µs),
-- as nine values; its arguments are ARGV[o + 1] … (o = 1 for a call on one
-- key: ARGV[2] …), the first three read as numbers by the tail (one.lua,
-- many.lua), and `h` the hint (ARGV[o + 6]; nil: none). At most one write: `w`, the TAT to store (nil: nothing to
-- write), is written once at the end.
local function decide(key, now, o, T, tau, n, h)
  local mode = ARGV[o + 4]
  local tat, paused, bad, w = now, 0, 0, nil
  -- The learned word's two parts (0, 0: fresh), as numbers and as text,
  -- and hi's cut (FULL − fraction); `ws`, the hinted word's text as
  -- stored (":<hi>:<lo>") when the key holds exactly the hint.
  local hi, lo, cut, hs, ls, ws = 0, 0, 0, nil, nil, nil
  local raw = redis.pcall('GET', key)
  if h then
    -- A hinted call: T and tau are the word's scaled T' and tau' (the
    -- engine's, bit-identical to the scaling below) if the key holds
    -- "<TAT>" then exactly the hint, a pause-free learned word; else the
    -- ceiling's are in ARGV[o + 7] and the full path runs.
    if type(raw) == 'string' then
      local a = string.match(raw, '^%d+')
      if a and #a <= 16 and string.sub(raw, #a + 1) == h and mode ~= 'adapt' then
        a = a + 0
        if a <= 9007199254740991 then
          if a > now then tat = a end
          hi, ws, raw = 262144, h, nil
        end
      end
    end
    if not ws then
      local x, y = string.match(ARGV[o + 7], '^(%d+):(%d+)$')
      T, tau = x + 0, y + 0
    end
  end
  if raw then
    -- A string, or the error table of a key of another type (WRONGTYPE).
    local v, p = nil, 0
    if type(raw) == 'string' then
      if #raw <= 16 and string.match(raw, '^%d+$') then
        v = raw + 0
      else
        -- A learned word first (a learning fleet's every call: its own
        -- branch, the fewest tests), then a pause alone, then both. `hs`,
        -- `ls`: the word's parts as stored, written back as they are.
        local a, c, d = string.match(raw, '^(%d+):(%d+):(%d+)$')
        if a then
          if #a <= 16 and #c <= 6 and #d <= 14 then
            hi, lo = c + 0, d + 0
            cut = hi % 131072
            if hi <= 262143 and cut <= 65536 and lo <= 17592186044415 then
              v, hs, ls = a + 0, c, d
            else
              hi, lo, cut = 0, 0, 0
            end
          end
        else
          local b
          a, b = string.match(raw, '^(%d+):(%d+)$')
          if not a then a, b, c, d = string.match(raw, '^(%d+):(%d+):(%d+):(%d+)$') end
          if a and #a <= 16 and #b <= 16 then
            if not c then
              v, p = a + 0, b + 0
            elseif #c <= 6 and #d <= 14 then
              hi, lo = c + 0, d + 0
              cut = hi % 131072
              if hi <= 262143 and cut <= 65536 and lo <= 17592186044415 then
                v, p, hs, ls = a + 0, b + 0, c, d
              else
                hi, lo, cut = 0, 0, 0
              end
            end
          end
        end
      end
    end
    if v and v <= 9007199254740991 and p <= 9007199254740991 then
      if v > now then tat = v end
      paused = p
    else
      bad, tat, hi, lo, cut, hs, ls = 1, now + tau, 0, 0, 0, nil, nil
      w = tat
    end
  end
  -- An adapt: the compare-and-swap of the word, before the scaling (the
  -- bucket then runs at the word it leaves). `ok` says whether it replaced.
  local ok, drop = 1, 0
  if mode == 'adapt' then
    ok = 0
    local sh, sl, nh, nl = string.match(ARGV[o + 5], '^(%d+):(%d+):(%d+):(%d+)$')
    if sh and #sh <= 6 and #sl <= 14 and #nh <= 6 and #nl <= 14
        and sh + 0 == hi and sl + 0 == lo then
      local h, l = nh + 0, nl + 0
      local nc = h % 131072
      if h <= 262143 and nc <= 65536 and l <= 17592186044415 then
        -- A lower share (a larger complement): the queue is dropped below.
        if nc > cut then drop = 1 end
        ok, hi, lo, cut, hs, ls = 1, h, l, nc, nh, nl
        w = tat
      end
    end
  end
  -- The learned share of the ceiling (see the header): exact integer
  -- arithmetic below 2^53 throughout.
  -- (x - x % 1 is floor(x) for x ≥ 0, exactly, without a call.)
  if cut > 0 then
    local f = 65536 - cut
    if f < 1 then f = 1 end
    -- b = tau / T, exact (tau = b · T).
    local b = tau / T
    b = b - b % 1
    local x = T * 65536
    if x < 9007199254740992 then
      -- T' = ceil(x / f): x is exact, and x / f is never rounded onto an
      -- integer (x < 2^53: it lies at least 1 / f from one, more than
      -- half its last place), so its floor is exact, and the ceiling one
      -- more unless f divides x.
      local t = x / f
      t = t - t % 1
      if t * f < x then t = t + 1 end
      if t > 1152921504606847 then t = 1152921504606847 end
      T = t
    else
      -- T · 65536 / f = q · 65536 + m / f (T = q · f + r, m = r · 65536
      -- < 2^33, the same argument).
      local q = T / f
      q = q - q % 1
      if q * f > T then q = q - 1 end
      local m = (T - q * f) * 65536
      local r = m / f
      r = r - r % 1
      if r * f < m then r = r + 1 end
      if q > 17592186044 then
        T = 1152921504606847
      else
        T = q * 65536 + r
        if T > 1152921504606847 then T = 1152921504606847 end
      end
    end
    -- burst' = floor(b · f / 65536) (a division by a power of two is
    -- exact), as u · f + floor(v · f / 65536) (b = u · 65536 + v) when
    -- b · f would pass 2^53.
    local s = b * f
    if s < 9007199254740992 then
      s = s / 65536
      s = s - s % 1
    else
      local u = b / 65536
      u = u - u % 1
      s = (b - u * 65536) * f / 65536
      s = u * f + s - s % 1
    end
    -- (tau' first: one product on the usual path, where neither bound
    -- below applies.)
    tau = s * T
    if tau > 1152921504606846 or s < 1 then
      if tau > 1152921504606846 then
        s = 1152921504606846 / T
        s = s - s % 1
        if s * T > 1152921504606846 then s = s - 1 end
      end
      if s < 1 then s = 1 end
      tau = s * T
    end
  end
  -- The reply: allowed (`ok`, above), retry_after, taken; `at`, the TAT
  -- its remaining and reset_after are read at.
  local retry, taken, at = 0, 0, tat
  if mode == 'resume' then
    -- Lifted only from exactly the state the pauses left; the queue
    -- behind a pause (its slots, its waiters) is never moved earlier.
    if paused > now then
      if bad == 0 and tat == paused + tau then
        paused = 0
        taken, at, w = 1, now + tau, now + tau
      else
        ok, retry = 0, paused - now
      end
    end
  elseif mode == 'adapt' then
    -- Decided above: the state as it is, under the word in force; after
    -- a drop, without the slots taken beyond an empty bucket at the new
    -- rate (from the end of a pause on, which stays): their holders, the
    -- adapters' waiters, take new ones (Learned::cut_since), and slots
    -- nobody uses would hold the fleet back a queue's length.
    if drop == 1 then
      local empty = now
      if paused > now then empty = paused end
      empty = empty + tau
      if tat > empty then tat, at, w = empty, empty, empty end
    end
  elseif n == 0 and mode ~= 'pause' then
    -- A query: the state as it is.
  elseif mode == 'check' then
    local new = tat + n * T
    local wait = new - tau - now
    if wait > 0 then
      ok, retry = 0, wait
    else
      taken, at, w = n, new, new
    end
  elseif mode == 'return' then
    -- Only the last slot goes back (see the header); never below the
    -- present, nor into a pause that is on. A taking whose end is past
    -- (tat = now) has nothing left to give.
    if tat > now and tat == ARGV[o + 5] + 0 then
      local back = tat - n * T
      local least = now
      if paused > now then least = paused + tau end
      if back < least then back = least end
      taken, at, w = n, back, back
    end
  elseif mode == 'pause' then
    -- Every slot from `start` on (the reservations waiting there, and the
    -- bucket's refill) moves δ later, in its order: the bucket is empty
    -- until `last`. A pause that ends no later than one already on changes
    -- nothing, so every instance obeying one Retry-After pauses once.
    local last = now + ARGV[o + 5]
    local start = now
    if paused > now then start = paused end
    if last > start then
      retry = last - start
      paused = last
      if tat < start + tau then tat = start + tau end
      tat = tat + retry
      at, w = tat, tat
    end
  else
    local take = n
    if mode == 'lease' then
      -- Up to ARGV[6] if there, at least n.
      local d = now + tau - tat
      local have = 0
      if d > 0 then
        have = math.floor(d / T)
        if have * T > d then have = have - 1 end
      end
      local most = ARGV[o + 5] + 0
      if have < most then most = have end
      if most > n then take = most end
    end
    local new = tat + take * T
    local wait = new - tau - now
    if mode == 'reserve' then
      if wait < 0 then wait = 0 end
      retry = wait
      if wait > ARGV[o + 5] + 0 then
        ok = 0
      else
        taken, at, w = take, new, new
      end
    elseif wait > 0 then
      ok, retry = 0, wait
    else
      taken, at, w = take, new, new
    end
  end
  if w then
    if ws then
      local keep = w - now
      if keep < tau then keep = tau end
      local text
      if paused > now then text = string.format('%d:%d', w, paused) .. ws else text = string.format('%d', w) .. ws end
      redis.call('SET', key, text, 'PX', string.format('%d', math.ceil(keep / 1000)))
    elseif hi == 0 and lo == 0 then
      if w > now then
        local text
        if paused > now then text = string.format('%d:%d', w, paused) else text = string.format('%d', w) end
        redis.call('SET', key, text, 'PX', string.format('%d', math.ceil((w - now) / 1000)))
      else
        redis.call('DEL', key)
      end
    else
      -- A learned word lives at least tau' (see the header); its parts
      -- are written as they were read (or given).
      local keep = w - now
      if keep < tau then keep = tau end
      local text
      if paused > now then
        text = string.format('%d:%d:', w, paused) .. hs .. ':' .. ls
      else
        text = string.format('%d:', w) .. hs .. ':' .. ls
      end
      redis.call('SET', key, text, 'PX', string.format('%d', math.ceil(keep / 1000)))
    end
  end
  -- Tokens left at `at`: floor(max(now + tau - at, 0) / T), exactly.
  local d = now + tau - at
  local left = 0
  if d > 0 then
    left = math.floor(d / T)
    if left * T > d then left = left - 1 end
  end
  return ok, left, retry, at - now, taken, bad, now, hi, lo
end
