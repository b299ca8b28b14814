"""The overload figures of ``concurrency_limit="auto"`` on a real server
(README, "Adaptive concurrency"): tests/overload_harness.py's scenarios,
each goal printed met or MISSED — a benchmark, run by ci/bench; it never
fails on a goal (the behaviour is tested in tests/test_overload.py).

Run: ``cd bindings/python && python bench/overload.py`` (~40 s)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from overload_harness import CAPACITY, Result, run_all, summarize  # noqa: E402


def goal(name: str, met: bool) -> None:
    print(f"goal {name}: {'met' if met else 'MISSED'}")


def recovery(results: list[Result], end: float, before_goodput: float, before_p50: float) -> float | None:
    """Seconds after ``end`` from which every half second serves 90 % of
    the goodput before at a p50 within 1.2x before (None: not by the run's
    end)."""
    last = max(r.due for r in results)
    starts = [end + k * 0.5 for k in range(int((last - end) / 0.5))]

    def fine(t: float) -> bool:
        s = summarize(results, t, t + 0.5)
        return s.goodput >= 0.9 * before_goodput and s.p50_ms <= 1.2 * before_p50

    for k, t in enumerate(starts):
        if all(fine(u) for u in starts[k:]):
            return t - end
    return None


def main() -> None:
    runs = run_all()
    base_ms = runs.base * 1000
    before = summarize(runs.slowed_results, 0.25, 1.0)
    back = recovery(runs.slowed_results, 4.0, before.goodput, before.p50_ms)
    peak = max(b for _, b in runs.slowed_seen)
    print(f"slowdown: before it p50 {before.p50_ms:.1f} ms, goodput {before.goodput:.0f}/s; baseline at most "
          f"{peak:.1f} ms, {runs.slowed_seen[-1][1]:.1f} ms at the end; "
          + (f"recovered {back:.1f} s after its end" if back is not None else "not recovered by the run's end"))
    goal("auto: p99 <= 3x unloaded", runs.auto.p99_ms <= 3 * base_ms)
    goal("auto: goodput >= 80 % of the capacity", runs.auto.goodput >= 0.8 * CAPACITY)
    goal("half background: goodput >= 80 % of the capacity", runs.mixed.goodput >= 0.8 * CAPACITY)
    goal("after the overload: all served from the first 0.25 s", min(runs.calm) >= 0.99)
    goal("slowdown: p99 <= 3x twice the unloaded", runs.slowed.p99_ms <= 6 * base_ms)
    goal("slowdown: goodput >= 80 % of 100/s from 1 s in", runs.slowed.goodput >= 80)
    goal("after the slowdown: p99 within 1.25x before", runs.recovered.p99_ms <= 1.25 * runs.auto.p99_ms)
    goal("after the slowdown: recovered within 2 s", back is not None and back <= 2.0)


if __name__ == "__main__":
    main()
