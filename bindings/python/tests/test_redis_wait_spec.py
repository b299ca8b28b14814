"""spec/redis_wait.json against a real Redis through the engine
(``_RedisEngine``): reservations, give-backs (whether Redis took the tokens
back), pauses, resumes and checks at explicit Redis times, the same vectors the Rust
and Node suites replay."""

from __future__ import annotations

import json
import pathlib
from typing import Any


import ratebound as rb
from redis_servers import Server, fresh_key, run_script as run

SPEC = pathlib.Path(__file__).resolve().parents[3] / "spec" / "redis_wait.json"


def test_redis_wait_vectors_replay_against_redis(server: Server) -> None:
    vectors = json.loads(SPEC.read_text())["vectors"]
    assert len(vectors) >= 6
    client = server.client()
    failures: list[str] = []
    steps = 0
    for v in vectors:
        c = v["config"]
        e = rb._ratebound._RedisEngine("token_bucket", rate=c["rate"], burst=c["burst"], prefix=fresh_key(v["id"]) + ":", timeout=2.0)
        key = v["id"]
        # The reservations granted, by step: the call and its slot's end.
        granted: list[Any] = []
        for i, step in enumerate(v["steps"]):
            granted.append(None)
            steps += 1
            at, n, kind = step["at_us"], step.get("n", 1), step["call"]
            got: dict[str, Any]
            if kind == "reserve":
                call = e.begin_reserve(key, n, step["max_wait_us"] / 1e6)
                assert isinstance(call, rb._ratebound._RedisCall), (v["id"], i)
                call = call.at(at)
                reply = run(client, call)
                try:
                    delay, source, end_us = e.finish_reserve(call, reply)
                    granted[i] = (call, end_us)
                    got = {"granted": True, "wait_us": round(delay * 1e6), "source": source}
                except rb.RateLimitExceeded as refused:
                    got = {"granted": False, "wait_us": round(refused.retry_after * 1e6)}
            elif kind == "return":
                held = granted[step["of"]] if "of" in step else next(g for g in reversed(granted) if g is not None)
                assert held is not None, (v["id"], i)
                got = {"given_back": e.given_back(run(client, e.give_back(*held).at(at)))}
            elif kind == "pause":
                call = e.begin_pause(key, step["for_us"] / 1e6).at(at)
                shift = e.finish_pause(run(client, call))
                assert shift is not None
                got = {"shift_us": round(shift * 1e6)}
            elif kind == "resume":
                got = {"resumed": e.finish_resume(run(client, e.begin_resume(key).at(at)))}
            elif kind == "check":
                call = e.begin(key, n).at(at)
                d = e.finish(call, run(client, call))
                got = {"allowed": d.allowed, "remaining": d.remaining, "retry_after_us": d.retry_after_ns // 1000}
            else:
                raise AssertionError(f"{v['id']} step {i}: unknown call {kind}")
            for field, want in step["expect"].items():
                if got.get(field) != want:
                    failures.append(f"{v['id']} step {i}: {field} = {got.get(field)!r}, want {want!r}")
    client.close()
    assert not failures, "\n".join(failures)
    assert steps == sum(len(v["steps"]) for v in vectors) and steps >= 20, steps
