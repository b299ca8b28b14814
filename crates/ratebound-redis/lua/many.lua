-- Many keys in one run (a batch): KEYS[1..N], ARGV[1] the clock argument
-- (read once: TIME is frozen for a script's run anyway), then each key's
-- own arguments, `per` = (#ARGV - 1) / N of them, in KEYS' order. The keys
-- are decided one after another in that order, exactly as N calls in that
-- order would decide them (a key twice: the second sees the first's
-- write). Reply: the N replies' seven integers each, one flat list.
local now = clock(ARGV[1])
local per = (#ARGV - 1) / #KEYS
local out = {}
for i = 1, #KEYS do
  local r = decide(KEYS[i], now, 1 + (i - 1) * per)
  for j = 1, 7 do out[#out + 1] = r[j] end
end
return out
