"""A driver for counting instructions per call with callgrind (which, unlike
time, does not depend on what else the machine is doing):
`python instructions.py MODE N` makes N calls of one kind; run it with N = 0
and N = 100 000 under `valgrind --tool=callgrind` and divide the difference
by N (`instructions.sh` does exactly that for every mode).

Modes: empty (an empty method), try (TokenBucket.try_acquire), check
(TokenBucket.check), keyed-empty (an empty one-argument method), keyed-str,
keyed-bytes, keyed-int (KeyedLimiter.try_acquire on one tracked key).
"""

from __future__ import annotations

import sys

import ratebound as rb


class Empty:
    def none(self) -> None:
        pass

    def one(self, key: object) -> None:
        pass


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    tb = rb.TokenBucket(10**8, 10**9)
    k = rb.KeyedLimiter(10**8, 10**9, max_keys=1_000_000)
    e = Empty()
    if mode.startswith("keyed-"):
        f, key = {
            "keyed-empty": (e.one, "user-1"),
            "keyed-str": (k.try_acquire, "user-1"),
            "keyed-bytes": (k.try_acquire, b"user-1"),
            "keyed-int": (k.try_acquire, 12345),
        }[mode]
        for _ in range(n):
            f(key)
        return
    g = {"empty": e.none, "try": tb.try_acquire, "check": tb.check}[mode]
    for _ in range(n):
        g()


if __name__ == "__main__":
    main()
