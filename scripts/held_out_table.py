"""The held-out code table of docs/strategies.md ("Code corpora"): symbol MRR@10 per repository and strategy with a
95% bootstrap interval, TypeScript minus Python pooled over questions (a bootstrap of the difference of means,
questions resampled within each language), and how many top-10 blocks show no line of code (a banner or a comment
alone).

    python scripts/build_code_set.py --folder REPO/src --out /tmp/sets/NAME --suffix .ts --keep-docs
    ragwb run --dataset /tmp/sets/NAME/corpus --questions /tmp/sets/NAME/questions.jsonl \
        --strategies chunks,hybrid,parent_child --set hybrid.fusion=weighted,rrf --workspace WS --run-id NAME
    python scripts/held_out_table.py --workspace WS --ts superstruct rxjs neverthrow \
        --py marshmallow more-itertools tenacity
    python scripts/held_out_table.py --workspace WS --lang Go chi logrus --lang Rust indexmap log \
        --lang Java jsoup javapoet --py marshmallow more-itertools tenacity   # any language against --base
"""
from __future__ import annotations

import argparse
import json
import re

import duckdb
import numpy as np

from rag.ingest.code.blocks import DOC_LABEL

POINTS = [("chunks", "defaults", "chunks"), ("hybrid", "fusion=weighted", "hybrid"),
          ("hybrid", "fusion=rrf", "hybrid rrf"), ("parent_child", "defaults", "parent_child")]
_COMMENT = re.compile(r"^\s*(//|/\*|\*|$)")  # a comment line of TypeScript (and blank)
_PY_COMMENT = re.compile(r"^\s*(#|$)")  # of Python (docstrings are strings: code)


def values(con, run: str, strategy: str, label: str) -> np.ndarray:
    rows = con.execute("SELECT s.value FROM scores s JOIN results r USING (run_id, strategy, point_id, question_id, "
                       "repeat) WHERE s.run_id = ? AND s.strategy = ? AND r.point_label = ? AND s.metric = "
                       "'symbol_mrr@10' AND s.status = 'ok' ORDER BY s.question_id", [run, strategy, label]).fetchall()
    return np.array([v for (v,) in rows], dtype=float)


def ci(x: np.ndarray, rng, n: int = 5000) -> tuple[float, float, float]:
    idx = rng.integers(0, len(x), (n, len(x)))
    m = x[idx].mean(axis=1)
    return float(x.mean()), float(np.quantile(m, 0.025)), float(np.quantile(m, 0.975))


def diff_ci(a: np.ndarray, b: np.ndarray, rng, n: int = 5000) -> tuple[float, float, float]:
    ma = a[rng.integers(0, len(a), (n, len(a)))].mean(axis=1)
    mb = b[rng.integers(0, len(b), (n, len(b)))].mean(axis=1)
    d = ma - mb
    return float(a.mean() - b.mean()), float(np.quantile(d, 0.025)), float(np.quantile(d, 0.975))


def codeless_blocks(con, run: str, strategy: str, label: str) -> tuple[int, int]:
    """(top-10 blocks whose fenced code has no code line, top-10 blocks) of one point; a `doc` chunk's block (a
    Doxygen page, a long banner: documentation of no definition, issue 86) is prose by design and not counted."""
    bad = total = 0
    for (blocks,) in con.execute("SELECT r.blocks FROM results r WHERE r.run_id = ? AND r.strategy = ? AND "
                                 "r.point_label = ?", [run, strategy, label]).fetchall():
        for b in json.loads(blocks or "[]")[:10]:
            if DOC_LABEL in b.get("text", "").split("```", 1)[0]:  # a `doc` chunk: prose by design, not counted
                continue
            pat = _PY_COMMENT if any(str(d).endswith(".py") for d in b.get("doc_ids", [])) else _COMMENT
            text = b.get("text", "")
            if text.count("```") >= 2:  # the fence the header opens and the block's last line closes (a JSDoc
                body = text[text.index("```") + 3:]  # example holds fences of its own)
                code = body.split("\n", 1)[-1][:body.split("\n", 1)[-1].rfind("```")]
            else:
                code = text
            total += 1
            bad += all(pat.match(x) for x in code.splitlines())
    return bad, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--ts", nargs="+", default=[], help="run ids of the TypeScript repositories")
    ap.add_argument("--py", nargs="+", default=[], help="run ids of the Python repositories")
    ap.add_argument("--lang", nargs="+", action="append", default=[], metavar=("LANGUAGE", "RUN"),
                    help="a language and the run ids of its repositories (repeatable): --lang Go chi logrus")
    ap.add_argument("--base", default="Python", help="the language every other is compared with (pooled)")
    a = ap.parse_args()
    langs = ([("TypeScript", a.ts)] if a.ts else []) + [(x[0], x[1:]) for x in a.lang] + (
        [("Python", a.py)] if a.py else [])
    con = duckdb.connect(f"{a.workspace}/results.duckdb", read_only=True)
    rng = np.random.default_rng(20261126)
    pooled: dict = {}
    print("| repository | language | questions | " + " | ".join(n for _, _, n in POINTS) + " |")
    print("|---|---|---|" + "---|" * len(POINTS))
    for lang, runs in langs:
        for run in runs:
            cells, n = [], 0
            for strat, label, name in POINTS:
                x = values(con, run, strat, label)
                pooled.setdefault((lang, name), []).append(x)
                m, lo, hi = ci(x, rng) if len(x) else (float("nan"),) * 3
                cells.append(f"{m:.3f} [{lo:.3f}, {hi:.3f}]")
                n = max(n, len(x))
            print(f"| {run} | {lang} | {n} | " + " | ".join(cells) + " |")
    print()
    for lang, _ in langs:
        if lang == a.base:
            continue
        for _, _, name in POINTS:
            x, base = np.concatenate(pooled[(lang, name)]), np.concatenate(pooled[(a.base, name)])
            d, lo, hi = diff_ci(x, base, rng)
            print(f"{name}: {lang} {x.mean():.3f} (n={len(x)}) - {a.base} {base.mean():.3f} (n={len(base)}) = "
                  f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]")
    bad = total = 0
    for _, runs in langs:
        for run in runs:
            for strat, label, _ in POINTS:
                b, t = codeless_blocks(con, run, strat, label)
                bad, total = bad + b, total + t
    print(f"top-10 blocks with no line of code (a banner or a comment alone): {bad} of {total}")


if __name__ == "__main__":
    main()
