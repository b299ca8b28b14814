-- ratebound: the helpers every script starts with (the engine prepends this
-- file to each script; the SHA covers the whole text).
-- clock(arg): now in integer µs — `arg` when a caller judges at an explicit
-- time (the test vectors' twin of TIME), else Redis' own TIME.
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- div(a, b): floor(a / b) for non-negative integers, exact where a double
-- division would round up to the next integer.
local function div(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 end
  return q
end
