"""`ragwb bench --only patterns`: the worst gitignore patterns the fourth sweep found (n `*a` segments then `b`
against a name of m `a`s: Python's `re` backtracks exponentially), matched the way a folder's listing matches them."""
from __future__ import annotations

import time

CASES = [(12, 40), (16, 60), (64, 200)]  # (stars, name length): 129 s and > 120 s a match before (issue 54, 1)


def patterns_figure() -> dict:
    from rag.ingest.folders import pattern_spec

    rows = []
    for stars, n in CASES:
        spec = pattern_spec(["*a" * stars + "b"])
        t = time.perf_counter()
        for _ in range(1000):
            spec.match_file("a" * n)
        rows.append({"stars": stars, "name_chars": n, "match_us": round((time.perf_counter() - t) * 1e3, 2)})
    return {"backend": type(spec._backend).__name__, "cases": rows, "target": "each match well under a millisecond"}
