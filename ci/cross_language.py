"""The Rust, Python and Node drivers share one global limit exactly: they
take turns on one Redis key (a bucket of 2/s, burst 3), each judged at an
explicit Redis time, and every answer is the one a single limiter would
give — checks, and reservations (waits), which take one order whoever
makes them. Starts and stops its own redis-server on a free 127.0.0.1 port.

Run by ci/test after the Rust, Python and Node builds, with the venv's
Python: python ci/cross_language.py <rust step binary> <node package dir>
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile
import uuid

import redis

import ratebound as rb
import ratebound.redis as rbr

# The Python tests' redis-server starter (a free port, persistence off, pinged).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bindings/python/tests"))
from redis_servers import Server  # noqa: E402

B = 60_000_000 * 20_000_000  # a base time in µs
# (driver, n, µs after B, allowed, remaining, retry_after_us): one bucket's
# answers whoever asks.
STEPS = [
    ("rust", 1, 0, True, 2, 0),
    ("python", 1, 0, True, 1, 0),
    ("node", 1, 0, True, 0, 0),
    ("rust", 1, 0, False, 0, 500_000),
    ("python", 1, 250_000, False, 0, 250_000),
    ("node", 1, 500_000, True, 0, 0),
    ("python", 2, 1_500_000, True, 0, 0),
    ("rust", 1, 1_500_000, False, 0, 500_000),
    ("node", 1, 2_000_000, True, 0, 0),
]

# Waits: (driver, n, µs after B, max_wait_us, granted, wait_us) on a bucket
# of 2/s burst 3 — reservations from the three languages take one order:
# the burst, then 0.5 s apart whoever asks; one beyond its max_wait takes
# nothing, so the next one gets that slot.
RESERVATIONS = [
    ("rust", 1, 0, 10_000_000, True, 0),
    ("python", 1, 0, 10_000_000, True, 0),
    ("node", 1, 0, 10_000_000, True, 0),
    ("node", 1, 0, 10_000_000, True, 500_000),
    ("rust", 1, 0, 10_000_000, True, 1_000_000),
    ("python", 1, 250_000, 10_000_000, True, 1_250_000),
    ("rust", 1, 250_000, 1_000_000, False, 1_750_000),
    ("node", 2, 500_000, 10_000_000, True, 2_000_000),
    ("python", 1, 500_000, 10_000_000, True, 2_500_000),
]

NODE_RESERVE = """
const rb = require(process.argv[1])
const Redis = require(process.argv[1] + '/node_modules/ioredis')
const [port, key, n, at, maxWait] = process.argv.slice(2)
const client = new Redis({ port: Number(port), host: '127.0.0.1' })
const e = new rb.RedisEngine({ rate: 2, burst: 3, timeout: 2 })
const call = e.beginReserve(key, Number(n), Number(maxWait) / 1e6, null).at(Number(at))
const [sha, k, ...args] = call.command()
client.evalsha(sha, 1, k, ...args).catch(() => client.eval(call.text, 1, k, ...args)).then((reply) => {
  const r = e.finishReserve(call, reply.map(Number), false, null)
  const granted = r.retryAfter === undefined
  console.log(JSON.stringify({ granted, wait_us: Math.round((granted ? r.delay : r.retryAfter) * 1e6) }))
  client.disconnect()
})
"""

NODE = """
const rb = require(process.argv[1])
const Redis = require(process.argv[1] + '/node_modules/ioredis')
const [port, key, n, at] = process.argv.slice(2)
const client = new Redis({ port: Number(port), host: '127.0.0.1' })
rb.redis.TokenBucket({ client, rate: 2, burst: 3, timeout: 2 })
  .checkAt(key, Number(n), Number(at))
  .then((d) => { console.log(JSON.stringify(d)); client.disconnect() })
"""


def main() -> int:
    rust, node_dir = sys.argv[1], str(pathlib.Path(sys.argv[2]).resolve())
    with tempfile.TemporaryDirectory() as d:
        server = Server(pathlib.Path(d)).start()
        port = server.port
        try:
            client = server.client()
            python = rbr.TokenBucket(client, rate=2, burst=3, timeout=2.0)
            key = f"cross-{uuid.uuid4().hex}"
            passed = failed = 0
            for i, (who, n, at, allowed, remaining, retry) in enumerate(STEPS):
                if who == "python":
                    d = python._check_at(key, n, B + at)
                    got = (d.allowed, d.remaining, round(d.retry_after * 1e6))
                elif who == "rust":
                    out = subprocess.run(
                        [rust, f"redis://127.0.0.1:{port}/", key, "2", "3", str(n), str(B + at)],
                        check=True, capture_output=True, text=True,
                    ).stdout
                    r = json.loads(out)
                    got = (r["allowed"], r["remaining"], r["retry_after_us"])
                else:
                    out = subprocess.run(
                        ["node", "-e", NODE, node_dir, str(port), key, str(n), str(B + at)],
                        check=True, capture_output=True, text=True,
                    ).stdout
                    r = json.loads(out)
                    got = (r["allowed"], r["remaining"], round(r["retryAfter"] * 1e6))
                want = (allowed, remaining, retry)
                if got == want:
                    passed += 1
                else:
                    failed += 1
                    print(f"cross-language step {i} ({who}): (allowed, remaining, retry_after_us) = {got}, want {want}")
            # Waits: reservations through each language's engine, one order.
            wait_key = f"cross-wait-{uuid.uuid4().hex}"
            engine = rb._ratebound._RedisEngine("token_bucket", rate=2, burst=3, timeout=2.0)
            for i, (who, n, at, max_wait, granted, wait) in enumerate(RESERVATIONS):
                if who == "python":
                    call = engine.begin_reserve(wait_key, n, max_wait / 1e6).at(B + at)
                    try:
                        reply = client.evalsha(call.sha, 1, call.key, *call.args)
                    except redis.exceptions.NoScriptError:
                        reply = client.eval(call.text, 1, call.key, *call.args)
                    try:
                        delay = engine.finish_reserve(call, list(reply))[0]
                        got = (True, round(delay * 1e6))
                    except rb.RateLimitExceeded as e:
                        got = (False, round(e.retry_after * 1e6))
                elif who == "rust":
                    out = subprocess.run(
                        [rust, f"redis://127.0.0.1:{port}/", wait_key, "2", "3", str(n), str(B + at), "reserve", str(max_wait)],
                        check=True, capture_output=True, text=True,
                    ).stdout
                    r = json.loads(out)
                    got = (r["granted"], r["wait_us"])
                else:
                    out = subprocess.run(
                        ["node", "-e", NODE_RESERVE, node_dir, str(port), wait_key, str(n), str(B + at), str(max_wait)],
                        check=True, capture_output=True, text=True,
                    ).stdout
                    r = json.loads(out)
                    got = (r["granted"], r["wait_us"])
                if got == (granted, wait):
                    passed += 1
                else:
                    failed += 1
                    print(f"cross-language reservation {i} ({who}): (granted, wait_us) = {got}, want {(granted, wait)}")
            python.close()
            client.close()
        finally:
            server.kill()
    print(f"cross-language: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
