"""The Rust, Python and Node drivers share one global limit exactly: they
take turns on one Redis key (a bucket of 2/s, burst 3), each judged at an
explicit Redis time, and every answer is the one a single limiter would
give. Starts and stops its own redis-server on a free 127.0.0.1 port.

Run by ci/test after the Rust, Python and Node builds, with the venv's
Python: python ci/cross_language.py <rust step binary> <node package dir>
"""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import redis

import ratebound.redis as rbr

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

NODE = """
const rb = require(process.argv[1])
const Redis = require(process.argv[1] + '/node_modules/ioredis')
const [port, key, n, at] = process.argv.slice(2)
const client = new Redis({ port: Number(port), host: '127.0.0.1' })
rb.redis.TokenBucket({ client, rate: 2, burst: 3, timeout: 2 })
  .checkAt(key, Number(n), Number(at))
  .then((d) => { console.log(JSON.stringify(d)); client.disconnect() })
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    rust, node_dir = sys.argv[1], str(pathlib.Path(sys.argv[2]).resolve())
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(host="127.0.0.1", port=port)
            for _ in range(200):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
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
            python.close()
            client.close()
        finally:
            server.kill()
            server.wait()
    print(f"cross-language: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
