#!/usr/bin/env python3
"""What a learned word costs the gcra script, in instructions (stdlib + valgrind).

script_cost.py times each row; on a shared machine its µs swing by more
than the +10 % that issue 39 allows a learned word (per-round ratios of the
same script from 0.7 to 1.6). This counts instead: it starts its own
redis-server under valgrind's callgrind (`--hz 1`, active expiry off, so
that background work stays out of the counts), loads lua/prelude.lua +
lua/gcra.lua + lua/one.lua, sets the keys up as script_cost.py's rows do
("held": a TAT 100 s ahead; "learned": the same and the word beside it;
a hot key over its limit for the refused rows), zeroes the counters, sends
N EVALSHA calls (pipelined by 100, keys drawn from a fixed seed) and reads
the instructions redis-server executed (Ir: reading the command, the
script, the reply) and those of EVALSHA's own run (the part INFO
commandstats times: the script and the reply it builds), ÷ N. The same text's counts agree within about 1 %
from run to run and from row to row of one run, whatever the load.

With REV, the same rows also run the script texts of that git revision
(`git show REV:crates/ratebound-redis/lua/...`) in the same server: a
change to the scripts measured against its base.

Usage: python3 benches/redis/script_instructions.py [N] [REV]
  N (default 1000) calls a row. Time: ~20 s a script text at the default.
"""

import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import script_cost as sc  # noqa: E402 (the rows' keys, arguments and client)


def text_at(rev):
    """The gcra script as the engine builds it, at a git revision."""
    out = []
    for name in ("prelude", "gcra", "one"):
        path = f"crates/ratebound-redis/lua/{name}.lua"
        out.append(subprocess.run(["git", "-C", sc.ROOT, "show", f"{rev}:{path}"],
                                  check=True, capture_output=True, text=True).stdout)
    return "".join(out)


# A hinted call's arguments (what Engine::call sends for a key whose last
# reply told sc.WORD): the word's scaled T' and tau' in place of the
# ceiling's, then the word's text as stored and the ceiling's T:tau.
HINT = ":" + sc.WORD
HINTED_FREE = ["2000", "1000000000", "1", "check", "1", HINT, "1000:1000000000"]
HINTED_TIGHT = ["200000", "2000000", "1", "check", "1", HINT, "100000:2000000"]

# (name, key or None for script_cost's 10 000 held keys, arguments, learned
# word in the keys (None: no set-up), expected allowed). The hinted rows
# run the worktree's text only (an older script reads no hint).
ROWS = [
    ("held", None, sc.GCRA_FREE, False, 1),
    ("learned", None, sc.GCRA_FREE, True, 1),
    ("hinted", None, HINTED_FREE, True, 1),
    ("refused", "rb:tb:hot", sc.GCRA_TIGHT, None, 0),
    ("learned refused", "rb:tb:hot", sc.GCRA_TIGHT, True, 0),
    ("hinted refused", "rb:tb:hot", HINTED_TIGHT, True, 0),
]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rev = sys.argv[2] if len(sys.argv) > 2 else None
    for tool in ("redis-server", "valgrind", "callgrind_control"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (apt-get install redis-server valgrind)")
    texts = [("worktree", sc.ours("gcra", "one"))]
    if rev:
        texts.insert(0, (rev, text_at(rev)))
    tmp = tempfile.mkdtemp(prefix="ratebound-script-ir-")
    port = sc.free_port()
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out.%p",
         "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--hz", "1", "--enable-debug-command", "yes", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def counted():
        """Dumps callgrind's counters: the instructions since the last zero,
        all of them and those of EVALSHA's own run (what INFO commandstats
        times: evalShaCommand with what it calls, the script and the reply
        it builds; not reading the command nor writing to the socket)."""
        before = set(glob.glob(tmp + "/out.*"))
        subprocess.run(["callgrind_control", "-d", str(server.pid)], capture_output=True, timeout=60)
        for _ in range(300):  # up to 30 s for the dump to appear
            for path in set(glob.glob(tmp + "/out.*")) - before:
                time.sleep(0.2)
                total = None
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        if line.startswith(("totals:", "summary:")):
                            total = int(line.split()[1])
                out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                                     capture_output=True, text=True, timeout=120).stdout
                command = [int(line.split()[0].replace(",", "")) for line in out.splitlines()
                           if line.rstrip().endswith("]") and ":evalShaCommand " in line]
                if total is None or not command:
                    sys.exit(f"cannot read callgrind's counts in {path}")
                return total, command[0]
            time.sleep(0.1)
        sys.exit("callgrind wrote no counts")

    results = {}
    try:
        r = None
        for _ in range(300):  # up to 30 s: redis-server starts slowly under valgrind
            try:
                r = sc.Redis(port)
                r.call("PING")
                break
            except OSError:
                r = None
                time.sleep(0.1)
        if r is None:
            sys.exit("redis-server did not start under valgrind")
        version = r.info("server")["redis_version"]
        r.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
        shas = [(label, r.call("SCRIPT", "LOAD", text)) for label, text in texts]
        for name, hot, args, learned, expect in ROWS:
            for label, sha in shas:
                if name.startswith("hinted") and label != "worktree":
                    continue
                r.call("FLUSHALL")
                if learned is not None:
                    r.pipeline(sc.held_keys("rb:tb:", learned, hot=hot)(r))
                rng = random.Random(7)
                keys = [hot or "rb:tb:%012d" % rng.randrange(10_000) for _ in range(n + 30)]
                for key in keys[:30]:  # the path is what the row says it is
                    first = r.call("EVALSHA", sha, "1", key, "", *args)
                hint = name.startswith("hinted")
                if first[0] != expect or (learned and first[7] == 0) or hint != (first[7] == 1 << 18):
                    sys.exit(f"{name} ({label}): unexpected reply {first}")
                subprocess.run(["callgrind_control", "-z", str(server.pid)], capture_output=True, timeout=60)
                for i in range(30, n + 30, 100):
                    r.pipeline([("EVALSHA", sha, "1", key, "", *args) for key in keys[i:i + 100]])
                total, command = counted()
                results[(name, label)] = (total / n, command / n)
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"Redis {version} under callgrind, {n} calls a row; instructions (Ir) per call:"
          " all of redis-server's / EVALSHA's own run (what INFO commandstats times)")
    print()
    labels = [label for label, _ in texts]
    print("| row | " + " | ".join(labels) + " |")
    print("| --- |" + " ---: |" * len(labels))
    for name, *_ in ROWS:
        print(f"| {name} | " + " | ".join("%s / %s" % tuple(f"{x:,.0f}" for x in results[(name, label)])
                                            if (name, label) in results else "—" for label in labels) + " |")
    print()
    for label in labels:
        for learned, base in (("learned", "held"), ("learned refused", "refused"),
                              ("hinted", "held"), ("hinted refused", "refused")):
            if (learned, label) not in results:
                continue
            print(f"{label}: {learned} against {base}: " + "; ".join(
                f"{what} {b - a:+,.0f} Ir a call ({100 * (b / a - 1):+.1f} %)"
                for what, a, b in zip(("all", "EVALSHA's run"), results[(base, label)], results[(learned, label)])))


if __name__ == "__main__":
    main()
