"""``ragwb bench``: speed figures as ratios of two things measured in the same process.

Figures (medians over ``--repeats``): ingest throughput vs the embedder alone; retrieval
per question per strategy vs a raw LanceDB vector query; re-packing from cached
candidates; a full offline evaluation of 5 strategies. See docs/performance.md.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def add_bench_args(p) -> None:
    p.add_argument("--dataset", default="squad2", help="bundled dataset to measure on (default squad2)")
    p.add_argument("--questions", type=int, default=1000, help="questions for the evaluation figures (1000)")
    p.add_argument("--embedder", default="e5", help="embedder (default e5)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per timing; medians reported")
    p.add_argument("--out", default="results/bench", help="folder for the JSON figures")
    p.add_argument("--skip-eval", action="store_true", help="skip the full-evaluation figure")
    p.add_argument("--only", nargs="*", choices=["ingest", "retrieval", "repack", "eval"], default=None,
                   help="measure only these figures (the index is built either way)")


def _median(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main_bench(a) -> int:
    from rag.corpora import load_bundled
    from rag.chunking import chunk_document
    from rag.embedders import EmbedderConfig, get_embedder
    from rag.index import IndexConfig, Workspace
    from rag.retrieval import Retriever
    from rag.strategies import STRATEGIES, get_strategy, make_params

    from .runner import RunConfig, run_evaluation

    figs: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "python": platform.python_version()}, "dataset": a.dataset}
    ds = load_bundled(a.dataset)
    cfg = IndexConfig(embedder=EmbedderConfig(a.embedder))
    emb = get_embedder(cfg.embedder)
    texts = [c.embed_text for d in ds.documents for c in chunk_document(d, cfg.chunking)[0]]
    tmp = Path(tempfile.mkdtemp(prefix="ragwb-bench-"))
    try:
        # 1. ingest vs embedder alone, same texts, cache empty each time
        want = lambda k: not a.only or k in a.only  # noqa: E731
        t_emb = _median(lambda: emb.embed_passages(texts), a.repeats if want("ingest") else 1)
        runs = []
        for i in range(a.repeats if want("ingest") else 1):
            ws = Workspace(tmp / f"ing{i}")
            t = time.perf_counter()
            ws.ingest(ds, cfg, progress=False)
            runs.append(time.perf_counter() - t)
        t_ing = statistics.median(runs)
        if want("ingest"):
            figs["ingest"] = {"chunks": len(texts), "embedder_chunks_per_s": len(texts) / t_emb,
                              "ingest_chunks_per_s": len(texts) / t_ing, "ratio": t_emb / t_ing, "target": ">= 0.9"}
        # 2. retrieval per question: strategy vs raw LanceDB vector query (both embed the question)
        ws = Workspace(tmp / "ing0")
        index = ws.index_name(ds.name, cfg)
        qs = [q.text for q in ds.questions[:200]]
        table = ws.table(index, "chunks")
        raw = lambda: [table.search(emb.embed_queries([q])[0]).limit(8).to_list() for q in qs]  # noqa: E731
        t_raw = _median(raw, a.repeats) / len(qs) if want("retrieval") else float("nan")
        figs["retrieval"] = {"raw_lancedb_ms": t_raw * 1000, "target": "<= 1.3", "strategies": {}}
        for name in (STRATEGIES if want("retrieval") else []):
            p = make_params(name)

            def one():
                r = Retriever(ws, index, cache_queries=False)  # fresh candidate cache, real embedding
                for q in qs:
                    get_strategy(name).retrieve(r, q, p)
            t = _median(one, a.repeats) / len(qs)
            figs["retrieval"]["strategies"][name] = {"ms": t * 1000, "ratio": t / t_raw}
        # 4. re-packing from cached candidates: 1000 questions x 5 strategies
        r = Retriever(ws, index)
        allq = [] if not want("repack") else None
        allq = [q.text for q in ds.questions[:a.questions]] if allq is None else allq
        params = {n: make_params(n) for n in STRATEGIES}
        pools = {}
        for n, p in params.items():
            r.warm(allq, p.search_key(get_strategy(n).needed(p)))
            pools[n] = [get_strategy(n).candidates(r, q, p) for q in allq]
        for n, p in params.items():  # first pack fills per-pool memo (page reranking etc.)
            for pool in pools[n]:
                get_strategy(n).pack(r, pool, p)
        # each repeat uses a budget never seen before, so no packing result is cached from an earlier pass
        budgets = iter(range(1500, 1500 + 10 * (a.repeats + 1), 10))

        def repack():
            budget = next(budgets)
            new = {n: make_params(n, max_context_tokens=budget) for n in STRATEGIES}
            for n in STRATEGIES:
                for pool in pools[n]:
                    get_strategy(n).pack(r, pool, new[n])
        t_pack = _median(repack, a.repeats)
        if want("repack"):
            figs["repack"] = {"questions": len(allq), "strategies": len(STRATEGIES), "seconds": t_pack,
                              "target": "<= 0.5 s"}
        # 3. full offline evaluation after ingest
        if want("eval") and not a.skip_eval:
            rc = RunConfig(dataset=a.dataset, index=cfg, limit=a.questions)
            t = time.perf_counter()
            s = run_evaluation(rc, workspace=tmp / "ing0", progress=False)
            figs["full_eval"] = {"items": s.items, "seconds": time.perf_counter() - t, "target": "<= 60 s"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(figs, indent=2))
    print(render(figs))
    print(f"figures: {path}")
    return 0


def render(f: dict) -> str:
    lines = [f"machine: {f['machine']}", f"dataset: {f['dataset']}"]
    i = f.get("ingest")
    if i:
        lines.append(f"ingest: {i['ingest_chunks_per_s']:.1f} chunks/s vs embedder alone {i['embedder_chunks_per_s']:.1f}"
                     f" -> ratio {i['ratio']:.2f} (target {i['target']})")
    r = f.get("retrieval")
    if r and r["strategies"]:
        lines.append(f"retrieval per question: raw LanceDB vector query {r['raw_lancedb_ms']:.2f} ms")
        for n, v in r["strategies"].items():
            lines.append(f"  {n:16s} {v['ms']:.2f} ms  ratio {v['ratio']:.2f} (target {r['target']})")
    p = f.get("repack")
    if p:
        lines.append(f"re-pack {p['questions']} questions x {p['strategies']} strategies from cached candidates: "
                     f"{p['seconds']:.3f} s (target {p['target']})")
    e = f.get("full_eval")
    if e:
        lines.append(f"full offline evaluation: {e['items']} items in {e['seconds']:.1f} s (target {e['target']})")
    return "\n".join(lines)
