-- Many keys in one run (a batch): KEYS[1..N], ARGV[1] the clock argument
-- (read once: TIME is frozen for a script's run anyway), then each key's
-- own arguments, `per` = (#ARGV - 1) / N of them, in KEYS' order. The keys
-- are decided one after another in that order, exactly as N calls in that
-- order would decide them (a key twice: the second sees the first's
-- write). Reply: the N replies' seven integers each, one flat list.
local per = (#ARGV - 1) / #KEYS
local out = {}
local j = 0
for i = 1, #KEYS do
  out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6], out[j + 7] =
    decide(KEYS[i], now, 1 + (i - 1) * per)
  j = j + 7
end
return out
