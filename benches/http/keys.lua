-- wrk script: each request carries one of 10 000 API keys in turn, so at a
-- few tens of thousands of requests per second each key sends a few per
-- second: within the example server's 10/s burst 20 per key.
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", "/", { ["X-API-Key"] = "key-" .. (counter % 10000) })
end
