-- Many keys in one run (a batch): KEYS[1..N], ARGV[1] the clock argument
-- (read once: TIME is frozen for a script's run anyway), then each key's
-- own arguments, `per` = (#ARGV - 1) / N of them, in KEYS' order. The keys
-- are decided one after another in that order, exactly as N calls in that
-- order would decide them (a key twice: the second sees the first's
-- write). Reply: the N replies' nine integers each, one flat list.
-- A hinted call's two more arguments (see gcra.lua) make `per` 7: every
-- call of a batch has as many (BatchCall::joins).
-- The first three arguments of a key (the limit's two numbers, n) are
-- mostly those of the key before (one limiter): Lua strings are interned,
-- so an equal string is the same object, compared at no cost, and its
-- number is reused instead of read again.
local per = (#ARGV - 1) / #KEYS
local out = {}
local j = 0
local sa, sb, sn, a, b, n, h
for i = 1, #KEYS do
  local o = 1 + (i - 1) * per
  local x, y, z = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  if x ~= sa then sa, a = x, x + 0 end
  if y ~= sb then sb, b = y, y + 0 end
  if z ~= sn then sn, n = z, z + 0 end
  if per > 5 then h = ARGV[o + 6] end
  out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6], out[j + 7],
    out[j + 8], out[j + 9] = decide(KEYS[i], now, o, a, b, n, h)
  j = j + 9
end
return out
