#!/usr/bin/env python3
"""What each Lua script costs Redis itself, in one run (stdlib only).

Starts its own redis-server on a free 127.0.0.1 port (no persistence), loads
ratebound's scripts (the same texts the engine builds: lua/prelude.lua, the
algorithm, then lua/one.lua or lua/many.lua) and rate-limiter-flexible's
(its Lua text read at run time from bindings/node/node_modules; nothing of
it is kept in this repository), then for each row runs

    redis-benchmark -P 16 -c 16 -n N -r 10000 EVALSHA <sha> <keys...> <args...>

(pipelined: the C client is not the limit) after CONFIG RESETSTAT, and reads
`cmdstat_evalsha` from INFO commandstats: the Redis-side µs per call (the
script's run, its redis.call()s included), and the server's CPU time per
call (used_cpu_user + used_cpu_sys: parsing and replying included). Rows run
interleaved, ROUNDS rounds; the table shows each figure's median.

Paths: "allowed" is 10 000 random keys under a limit none of them reaches,
"refused" one hot key that is over its limit after the first call. A batch
row is one script run over 16 or 64 random keys (µs per decision = µs per
call ÷ keys). A "held" row's keys each hold a bucket in use before the run (a TAT
100 s ahead: the key is there on every call, as a partner's key is under
steady traffic — the "allowed" row's keys mostly expire between calls); a
"learned" row's keys hold the same and a learned word beside it (what the
outbound adapters learn of a partner's limit: half the ceiling), so the
script scales the bucket on every call. Learned against held is what
learning costs an acquisition (issue 39's goal: at most +10 %). rate-limiter-flexible always runs the same three commands
(SET NX EX, INCRBY, PTTL) whatever its count: its two rows differ only in the
keys. The two "floor" rows are what any script of ours must at least do —
TIME, GET (and SET with PX when it admits), a reply of nine integers —
deciding nothing: the part of a row's cost that is not its Lua.

Usage: python3 benches/redis/script_cost.py [ROUNDS] [SCALE]
  ROUNDS (default 3) rounds; SCALE (default 1.0) multiplies every row's -n.
Time: ~1 min at the defaults on 2 shared cores (each redis-benchmark run is
bounded by a 60 s timeout, the whole by the rounds).
"""

import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LUA = os.path.join(ROOT, "crates", "ratebound-redis", "lua")
RLF = os.path.join(ROOT, "bindings", "node", "node_modules", "rate-limiter-flexible")


def lua(name):
    with open(os.path.join(LUA, name), encoding="utf-8") as f:
        return f.read()


def ours(algorithm, tail):
    """The script text as the engine builds it (script.rs: script!)."""
    return lua("prelude.lua") + lua(algorithm + ".lua") + lua(tail + ".lua")


def peer_script():
    """rate-limiter-flexible's RateLimiterRedis script and its version
    (None, None when bindings/node has no node_modules).

    The text is a JavaScript template literal whose lines end in a
    backslash (a line continuation: the Lua text is one line).
    """
    path = os.path.join(RLF, "lib", "RateLimiterRedis.js")
    if not os.path.exists(path):
        return None, None
    with open(path, encoding="utf-8") as f:
        source = f.read()
    m = re.search(r"const incrTtlLuaScript = `(.*?)`;", source, re.S)
    if not m:
        sys.exit(f"cannot find incrTtlLuaScript in {path}")
    text = m.group(1).replace("\\\n", "")
    with open(os.path.join(RLF, "package.json"), encoding="utf-8") as f:
        version = re.search(r'"version":\s*"([^"]+)"', f.read()).group(1)
    return text, version


class Redis:
    """A minimal RESP client: enough for SCRIPT LOAD, INFO, CONFIG."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.read()

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("redis closed the connection")
                self.buf += chunk
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def pipeline(self, commands):
        """Sends every command, then reads every reply (in order)."""
        out = []
        for args in commands:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return [self.read() for _ in commands]

    def info(self, section):
        fields = {}
        for line in self.call("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields[k] = v
        return fields


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Our scripts' arguments after KEYS: the clock ("" = Redis' TIME), then per
# key what Engine::call sends (algorithm.rs in_redis: the fixed two,
# then n, mode, max).
GCRA_FREE = ["1000", "1000000000", "1", "check", "1"]  # 1000/s, burst 10^6
GCRA_TIGHT = ["100000", "2000000", "1", "check", "1"]  # 10/s, burst 20
GCRA_RESERVE = ["1000", "1000000000", "1", "reserve", "0"]  # due now: taken
FW_FREE = ["1000000000", "60000000", "1", "check", "1"]  # 10^9 per minute
FW_TIGHT = ["10", "60000000", "1", "check", "1"]  # 10 per minute
SW_FREE = ["1000000", "60000000", "1", "check", "1"]  # 10^6 per minute
SW_TIGHT = ["10", "60000000", "1", "check", "1"]  # 10 per minute

RANDOM = "__rand_int__"  # redis-benchmark draws each occurrence in 0..-r


def one(script, key, args):
    return (script, ["1", key, ""] + args)


def many(script, prefix, args, keys):
    return (script, [str(keys)] + [prefix + RANDOM] * keys + [""] + args * keys)


# The least any script of our contract can cost: Redis' clock, the key read,
# a write with its expiry, and the reply's nine integers, deciding nothing
# (our own text; a reference, not a limiter).
FLOOR_WRITE = ("local t = redis.call('TIME') redis.pcall('GET', KEYS[1]) "
               "redis.call('SET', KEYS[1], '1733000000123456', 'PX', '1000') "
               "return {1, 0, 0, 0, 1, 0, 0, 0, 0}")
FLOOR_READ = "local t = redis.call('TIME') redis.pcall('GET', KEYS[1]) return {0, 0, 0, 0, 0, 0, 0, 0, 0}"

# A learned word as lua/gcra.lua keeps it beside the TAT: half the ceiling
# (65536ths: the cut 32768), left by a cut (bit 17 of hi), changed at a
# Unix instant in ms.
WORD = "%d:%d" % ((1 << 17) | 32768, 1_800_000_000_000)


def held_keys(prefix, learned, hot=None):
    """The keys a "held" or learned row runs on (-r 10000's 10 000, twelve
    digits, or the one hot key), each holding a TAT 100 s ahead of Redis'
    clock (a bucket in use: its key is there on every call, as a partner's
    key is under steady traffic) and, for a learned row, the word beside
    it. Returns a function of the connection: the commands to send."""
    names = [hot] if hot else [prefix + "%012d" % i for i in range(10_000)]

    def commands(r):
        sec, usec = r.call("TIME")
        tat = int(sec) * 1_000_000 + int(usec) + 100_000_000
        value = f"{tat}:{WORD}" if learned else str(tat)
        return [("SET", k, value, "PX", "600000") for k in names]

    return commands


def rows(peer_version):
    """(name, path, script, argv, decisions per call, -n, expected allowed,
    the commands that set the keys up after FLUSHALL)."""
    peer = f"rate-limiter-flexible {peer_version}"
    # The peer's arguments as RateLimiterRedis passes them for consume(key,
    # 1) with points 10, duration 1 s: points to consume, the duration in
    # whole seconds, then this.points and this.duration (unused by its text).
    peer_args = ["1", "1", "10", "1"]
    return [
        ("gcra", "allowed, 10 000 keys", *one("gcra", "rb:tb:" + RANDOM, GCRA_FREE), 1, 120_000, 1),
        ("gcra", "allowed, 10 000 keys held", *one("gcra", "rb:tb:" + RANDOM, GCRA_FREE), 1, 120_000, 1,
         held_keys("rb:tb:", False)),
        ("gcra learned", "allowed, 10 000 keys held", *one("gcra", "rb:tb:" + RANDOM, GCRA_FREE), 1, 120_000, 1,
         held_keys("rb:tb:", True)),
        ("gcra", "refused, 1 hot key", *one("gcra", "rb:tb:hot", GCRA_TIGHT), 1, 120_000, 0),
        ("gcra learned", "refused, 1 hot key", *one("gcra", "rb:tb:hot", GCRA_TIGHT), 1, 120_000, 0,
         held_keys("rb:tb:", True, hot="rb:tb:hot")),
        ("gcra", "reserve (due now), 10 000 keys", *one("gcra", "rb:tb:" + RANDOM, GCRA_RESERVE), 1, 120_000, 1),
        ("fixed_window", "allowed, 10 000 keys", *one("fixed_window", "rb:fw:" + RANDOM, FW_FREE), 1, 120_000, 1),
        ("fixed_window", "refused, 1 hot key", *one("fixed_window", "rb:fw:hot", FW_TIGHT), 1, 120_000, 0),
        ("sliding_window", "allowed, 10 000 keys", *one("sliding_window", "rb:sw:" + RANDOM, SW_FREE), 1, 120_000, 1),
        ("sliding_window", "refused, 1 hot key", *one("sliding_window", "rb:sw:hot", SW_TIGHT), 1, 120_000, 0),
        ("gcra batch", "16 keys a call, allowed", *many("gcra_batch", "rb:tb:", GCRA_FREE, 16), 16, 20_000, 1),
        ("gcra batch", "64 keys a call, allowed", *many("gcra_batch", "rb:tb:", GCRA_FREE, 64), 64, 5_000, 1),
        ("fixed_window batch", "64 keys a call, allowed", *many("fixed_window_batch", "rb:fw:", FW_FREE, 64), 64, 5_000, 1),
        ("floor: TIME, GET, SET PX, 9 integers", "no decision, 10 000 keys", *one("floor_write", "rb:tb:" + RANDOM, GCRA_FREE), 1, 120_000, None),
        ("floor: TIME, GET, 9 integers", "no decision, 1 hot key", *one("floor_read", "rb:tb:hot", GCRA_TIGHT), 1, 120_000, None),
        (peer, "under the limit, 10 000 keys", "peer", ["1", "rlflx:" + RANDOM] + peer_args, 1, 120_000, None),
        (peer, "over the limit, 1 hot key", "peer", ["1", "rlflx:hot"] + peer_args, 1, 120_000, None),
    ]


def sample(argv):
    """argv with every random placeholder replaced by one fixed key."""
    return [a.replace(RANDOM, "000000000042") for a in argv]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    scale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    for tool in ("redis-server", "redis-benchmark"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (apt-get install redis-server redis-tools)")
    peer_text, peer_version = peer_script()
    if peer_text is None:
        print("rate-limiter-flexible is not installed (cd bindings/node && npm ci): its rows are left out")
    texts = {
        "gcra": ours("gcra", "one"),
        "fixed_window": ours("fixed_window", "one"),
        "sliding_window": ours("sliding_window", "one"),
        "gcra_batch": ours("gcra", "many"),
        "fixed_window_batch": ours("fixed_window", "many"),
        "floor_write": FLOOR_WRITE,
        "floor_read": FLOOR_READ,
    }
    if peer_text is not None:
        texts["peer"] = peer_text
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="ratebound-script-cost-")
    pidfile = os.path.join(tmp, "redis.pid")
    subprocess.run(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--daemonize", "yes", "--pidfile", pidfile,
         "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
        check=True, timeout=10,
    )
    try:
        r = None
        for _ in range(100):  # up to 5 s for the server to listen
            try:
                r = Redis(port)
                r.call("PING")
                break
            except OSError:
                time.sleep(0.05)
        if r is None:
            sys.exit("redis-server did not start")
        version = r.info("server")["redis_version"]
        shas = {name: r.call("SCRIPT", "LOAD", text) for name, text in texts.items()}
        table = [row for row in rows(peer_version) if row[2] in texts]
        results = {i: [] for i in range(len(table))}
        started = time.time()
        for _round in range(rounds):
            for i, (name, path, script, argv, per, n, expect, *setup) in enumerate(table):
                r.call("FLUSHALL")
                for commands in setup:
                    r.pipeline(commands(r))
                # One call first: the path is what the row says it is (and
                # a hot key is over its limit before the run).
                first = r.call("EVALSHA", shas[script], *sample(argv))
                for _ in range(30):
                    first = r.call("EVALSHA", shas[script], *sample(argv))
                if expect is not None and first[0] != expect:
                    sys.exit(f"{name} {path}: allowed = {first[0]}, want {expect} ({first})")
                if name.endswith("learned") and first[7] == 0:
                    sys.exit(f"{name} {path}: no learned word in force ({first})")
                r.call("CONFIG", "RESETSTAT")
                cpu0 = r.info("cpu")
                cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-P", "16",
                       "-c", "16", "-n", str(int(n * scale)), "-r", "10000", "-q",
                       "EVALSHA", shas[script]] + argv
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
                cpu1 = r.info("cpu")
                stats = r.info("commandstats").get("cmdstat_evalsha", "")
                fields = dict(kv.split("=") for kv in stats.split(",") if "=" in kv)
                if int(fields.get("failed_calls", "0")) or int(fields.get("rejected_calls", "0")):
                    sys.exit(f"{name} {path}: failed calls ({stats}): {r.info('errorstats')}")
                rps = re.findall(r"([\d.]+) requests per second", out)
                if not rps or not fields:
                    sys.exit(f"{name} {path}: cannot read redis-benchmark's output: {out!r}")
                calls = int(fields["calls"])
                cpu = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_user", "used_cpu_sys"))
                results[i].append((float(fields["usec_per_call"]), cpu * 1e6 / calls, float(rps[-1])))
        took = time.time() - started
    finally:
        try:
            with open(pidfile) as f:
                os.kill(int(f.read().strip()), 15)
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
        shutil.rmtree(tmp, ignore_errors=True)

    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"]
    print(f"Redis {version}, {rounds} rounds, medians; {took:.0f} s; load average {' '.join(load)}")
    print("command per row: redis-benchmark -P 16 -c 16 -n N -r 10000 -q EVALSHA <sha> <keys> <args>;"
          " µs/call = INFO commandstats cmdstat_evalsha usec_per_call; CPU µs/call = the server's"
          " used_cpu_user+sys over the run ÷ calls")
    print()
    print("| script | path | Redis-side µs / call | µs / decision | server CPU µs / decision | calls/s | decisions/s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for i, (name, path, _script, _argv, per, _n, _expect, *_setup) in enumerate(table):
        usec = statistics.median(v[0] for v in results[i])
        cpu = statistics.median(v[1] for v in results[i])
        rps = statistics.median(v[2] for v in results[i])
        print(f"| {name} | {path} | {usec:.2f} | {usec / per:.3f} | {cpu / per:.3f} | {rps:,.0f} | {rps * per:,.0f} |")


if __name__ == "__main__":
    main()
