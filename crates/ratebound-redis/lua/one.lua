-- One key: KEYS[1], ARGV[1] the clock argument, the algorithm's arguments
-- from ARGV[2] on (ARGV[7]: gcra.lua's hint; nil without one). Reply:
-- the nine integers described above.
return {decide(KEYS[1], now, 1, ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0, ARGV[7])}
