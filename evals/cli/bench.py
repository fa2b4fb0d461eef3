"""``ragwb bench``: the speed benchmark."""
from __future__ import annotations


def cmd_bench(a) -> int:
    from evals.bench.suite import main_bench

    return main_bench(a)


def add_bench(sub) -> None:
    s = sub.add_parser("bench", help="measure speed against the raw limits (docs/performance.md)")
    from evals.bench.suite import add_bench_args
    add_bench_args(s)
    s.set_defaults(fn=cmd_bench)
