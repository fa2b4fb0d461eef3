"""``ragwb bench``: speed figures as ratios of two things measured in the same process.

Figures (medians over ``--repeats``): ingest throughput vs the embedder alone; retrieval
per question per strategy vs a raw LanceDB vector query; re-packing from cached
candidates; a full offline evaluation of 5 strategies. See docs/performance.md.
"""
from __future__ import annotations

import json
import os
import sys
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
    p.add_argument("--repeats", type=int, default=3, help="repeats per timing (for apply: fresh sessions); medians reported")
    p.add_argument("--out", default="results/bench", help="folder for the JSON figures")
    p.add_argument("--skip-eval", action="store_true", help="skip the full-evaluation figure")
    p.add_argument("--growth", nargs="*", type=int, default=[1, 4, 16],
                   help="corpus copies for the growth curve (default 1 4 16; empty to skip)")
    p.add_argument("--only", nargs="*", choices=["ingest", "retrieval", "repack", "eval", "ragas", "llm", "growth",
                                                 "rerun", "support", "mainjob", "scale", "scale5", "engines", "apply",
                                                 "gate", "score", "system", "race", "search", "index-grid",
                                                 "patterns", "score-stream", "plugins", "embed", "browser",
                                                 "first-chart"],
                   default=None,
                   help="measure only these figures; scale, scale5, mainjob and engines (minutes each) run only "
                        "when named here")
    _add_extra(p)


def _add_extra(p) -> None:
    p.add_argument("--rerun-files", type=int, default=3, help="PDFs in the re-run cost figure (default 3)")
    p.add_argument("--first-chart-chunks", type=int, default=5000,
                   help="chunks in the folder of PDFs the first-chart figure writes (default 5000)")
    p.add_argument("--scale", nargs="*", type=int, default=[10_000, 100_000, 1_000_000],
                   help="rows for the ANN scale curve (default 10000 100000 1000000)")
    p.add_argument("--scale5", nargs="*", default=["10000:exact", "10000:ann", "100000:ann", "1000000:ann"],
                   help="ROWS:MODE points of the 5-strategy retrieval curve (default 10000:exact 10000:ann "
                        "100000:ann 1000000:ann)")
    p.add_argument("--browser-sizes", nargs="*", type=int, default=[12, 300], metavar="N",
                   help="browser figure: questions of each page timed in Chromium (default 12 300)")
    p.add_argument("--engine-cpus", type=int, default=2, help="engines figure: num_cpus of the local Ray runtime (2)")
    p.add_argument("--gate-items", type=int, default=50_000,
                   help="gate figure: items in each of the two stored runs compared (default 50000)")
    p.add_argument("--score-stream-rows", nargs="*", type=int, default=[100_000, 1_000_000], metavar="ROWS",
                   help="score-stream figure: log sizes scored in a fresh process each (default 100000 1000000)")
    p.add_argument("--score-rows", nargs=3, type=int, default=[300, 20_000, 100_000],
                   metavar=("DISTINCT", "REPEATED", "BULK"),
                   help="score figure: rows with distinct contexts, rows over 300 repeated contexts, and rows scored "
                        "without the support scorer (default 300 20000 100000; 0 skips one)")


def _median(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main_bench(a) -> int:
    from rag.ingest.corpora import load_bundled
    from rag.index.embedders import EmbedderConfig
    from rag.index.workspace import IndexConfig

    figs: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                              "python": platform.python_version()}, "dataset": a.dataset}
    ds = load_bundled(a.dataset)
    cfg = IndexConfig(embedder=EmbedderConfig(a.embedder))
    tmp = Path(tempfile.mkdtemp(prefix="ragwb-bench-"))
    try:
        want = lambda k: not a.only or k in a.only  # noqa: E731
        # the figures below need the bundled index built (minutes with e5); the others build their own
        if any(want(k) for k in ("ingest", "retrieval", "repack", "eval", "ragas", "apply")):
            index_figures(a, figs, ds, cfg, tmp, want)
        for name, (key, only_named, fn) in named_figures(a, ds, cfg, tmp).items():
            if want(name) and (a.only or not only_named):
                figs[key] = fn()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(figs, indent=2))
    from .render import render

    print(render(figs))
    print(f"figures: {path}")
    return 0


def named_figures(a, ds, cfg, tmp: Path) -> dict:
    """``--only`` name -> (key in the JSON, measured only when named, the figure's call). The ones only measured
    when named take minutes (e5 at log size, 1M rows, 900 requests of 200 ms, whole grids)."""
    def lazy(module: str, fn: str, *args, **kw):
        def call():
            import importlib

            from rag.ingest.bundled import CheckoutOnly

            try:
                return getattr(importlib.import_module(f"evals.bench.{module}"), fn)(*args, **kw)
            except CheckoutOnly as e:  # a figure that reads the checkout's tests/ or docs/, run from a wheel
                print(f"ragwb bench: {e}", file=sys.stderr)
                return {"skipped": str(e)}
        return call

    return {
        "gate": ("gate", False, lazy("gate", "gate_figure", tmp / "gate", a.gate_items)),
        "llm": ("llm_rerun", False, lazy("scoring", "llm_rerun", a.dataset, tmp / "llm", min(a.questions, 100))),
        **({"growth": ("growth", False, lazy("costs", "growth", ds, cfg, a.growth, tmp / "growth"))}
           if a.growth else {}),  # --growth with no copies: no curve to draw
        "rerun": ("rerun", False, lazy("costs", "rerun_cost", cfg, tmp / "rerun", a.rerun_files)),
        "support": ("support", False, lazy("scoring", "support_speed", min(a.questions, 1000))),
        "score": ("score", True, lazy("logged", "score_figure", tmp / "score", *a.score_rows)),
        "plugins": ("plugins", True, lazy("plugins", "plugins_figure", tmp / "plugins", repeats=max(1, a.repeats))),
        "score-stream": ("score_stream", True, lazy("score_stream", "score_stream_figure", tmp / "score_stream",
                                                    a.score_stream_rows)),
        "system": ("system", True, lazy("system", "system_overhead", tmp / "system")),
        "race": ("race", True, lazy("race", "race_figure", tmp / "race")),
        "search": ("search", True, lazy("search", "search_figure", tmp / "search")),
        "embed": ("embed", True, lazy("embed", "embed_figure", tmp / "embed")),
        "first-chart": ("first_chart", True, lazy("first_chart", "first_chart_figure", tmp / "first_chart",
                                                  a.first_chart_chunks)),
        "browser": ("browser", True, lazy("browser", "browser_figure", tmp / "browser", a.dataset, a.embedder,
                                          tuple(a.browser_sizes), max(2, a.repeats * 2))),
        "patterns": ("patterns", False, lazy("patterns", "patterns_figure")),
        "index-grid": ("index_grid", True, lazy("index_grid", "index_grid_figure", tmp / "index_grid", "xquad-en",
                                                a.embedder)),
        "scale": ("scale", True, lazy("scale", "scale_curve", a.scale)),
        "mainjob": ("mainjob", True, lazy("costs", "main_job_cold", tmp / "mainjob")),
        "scale5": ("scale5", True, lazy("scale", "strategies_curve",
                                        [(int(x.split(":")[0]), x.split(":")[1]) for x in a.scale5],
                                        min(a.questions, 50))),
        "engines": ("engines", True, lazy("costs", "engine_overhead", a.dataset, tmp / "engines", a.questions,
                                          a.engine_cpus)),
    }


def _ingest_figure(a, ds, emb, tmp: Path) -> dict:
    """Ingest vs the embedder alone, same texts, cache empty each time. The bundled sets ship their vectors for the
    default chunking, so the timed ingest uses a chunking they do not cover (120/12 tokens): every chunk is
    embedded, as in a user's own corpus (it used to time an ingest that embedded nothing: "ratio 135")."""
    import dataclasses

    from rag.index.embedders import EmbedderConfig
    from rag.index.workspace import IndexConfig, Workspace
    from rag.ingest.chunking import ChunkConfig, chunk_document

    icfg = IndexConfig(ChunkConfig(chunk_tokens=120, overlap=12), EmbedderConfig(a.embedder))
    itexts = [c.embed_text for d in ds.documents for c in chunk_document(d, icfg.chunking)[0]]
    t_emb = _median(lambda: emb.embed_passages(itexts), a.repeats)
    runs, embedded = [], []
    # under another name: a bundled set's shipped vectors are seeded into the cache, and the chunks they happen
    # to share with this chunking (short paragraphs) would not be embedded
    ids = dataclasses.replace(ds, name=f"{ds.name}-bench")
    for i in range(a.repeats):
        t = time.perf_counter()
        summ = Workspace(tmp / f"ingest{i}").ingest(ids, icfg, progress=False)
        runs.append(time.perf_counter() - t)
        embedded.append(summ.embedded)
    t_ing = statistics.median(runs)
    return {"chunks": len(itexts), "embedded": min(embedded), "embedder_chunks_per_s": len(itexts) / t_emb,
            "ingest_chunks_per_s": len(itexts) / t_ing, "ratio": t_emb / t_ing, "target": ">= 0.9"}


def _retrieval_figure(a, ds, emb, ws, index: str) -> dict:
    """Retrieval per question: each strategy against a raw LanceDB vector query (both embed the question)."""
    from rag.index.retrieval import Retriever
    from rag.strategies import default_strategies, get_strategy, make_params

    qs = [q.text for q in ds.questions[:200]]
    table = ws.table(index, "chunks")
    raw = lambda: [table.search(emb.embed_queries([q])[0]).limit(8).to_list() for q in qs]  # noqa: E731
    t_raw = _median(raw, a.repeats) / len(qs)
    out = {"raw_lancedb_ms": t_raw * 1000, "target": "<= 1.3", "strategies": {}}
    for name in default_strategies():  # routed is opt-in
        p = make_params(name)

        def one():
            r = Retriever(ws, index, cache_queries=False)  # fresh candidate cache, real embedding
            for q in qs:
                get_strategy(name).retrieve(r, q, p)
        t = _median(one, a.repeats) / len(qs)
        out["strategies"][name] = {"ms": t * 1000, "ratio": t / t_raw}
    return out


def index_figures(a, figs: dict, ds, cfg, tmp: Path, want) -> None:
    """The figures that read the bundled set's index: ingest, retrieval, repack, apply, the full evaluation, ragas."""
    from rag.index.embedders import get_embedder
    from rag.index.retrieval import Retriever
    from rag.index.workspace import Workspace

    from evals.run.runner import RunConfig, run_evaluation

    emb = get_embedder(cfg.embedder)
    if want("ingest"):
        figs["ingest"] = _ingest_figure(a, ds, emb, tmp)
    Workspace(tmp / "ing0").ingest(ds, cfg, progress=False)  # the index the figures below read
    ws = Workspace(tmp / "ing0")
    index = ws.index_name(ds.name, cfg)
    figs["retrieval"] = (_retrieval_figure(a, ds, emb, ws, index) if want("retrieval") else
                         {"raw_lancedb_ms": float("nan"), "target": "<= 1.3", "strategies": {}})
    if want("repack"):
        figs["repack"] = repack_figure(Retriever(ws, index), [q.text for q in ds.questions[:a.questions]], a.repeats)
    if want("apply"):
        from .apply import apply_figure_fresh, apply_sessions

        figs["apply"] = apply_sessions([apply_figure_fresh(a.dataset, tmp / "ing0", a.embedder, a.questions)
                                        for _ in range(max(1, a.repeats))])
    if want("eval") and not a.skip_eval:  # a full offline evaluation after ingest
        t = time.perf_counter()
        s = run_evaluation(RunConfig(dataset=a.dataset, index=cfg, limit=a.questions), workspace=tmp / "ing0",
                           progress=False)
        figs["full_eval"] = {"items": s.items, "seconds": time.perf_counter() - t, "target": "<= 60 s"}
    if want("ragas"):
        from .scoring import ragas_comparison

        figs["ragas"] = ragas_comparison(ds, tmp / "ing0", cfg, min(a.questions, 1000))


def repack_figure(r, questions: list[str], repeats: int) -> dict:
    """1,000 questions x 5 strategies re-packed from cached candidates after a token-budget change."""
    from rag.strategies import default_strategies, get_strategy, make_params

    STRATEGIES = default_strategies()  # routed is opt-in

    params = {n: make_params(n) for n in STRATEGIES}
    pools = {}
    for n, p in params.items():
        r.warm(questions, p.search_key(get_strategy(n).needed(p)))
        pools[n] = [get_strategy(n).candidates(r, q, p) for q in questions]
        for pool in pools[n]:  # the first pack fills the per-pool memos (page reranking, fusion)
            get_strategy(n).pack(r, pool, p)
    # each repeat uses a budget never seen before, so no packing result is cached from an earlier pass
    budgets = iter(range(1500, 1500 + 10 * (repeats + 1), 10))

    def repack():
        budget = next(budgets)
        for n in STRATEGIES:
            p = make_params(n, max_context_tokens=budget)
            for pool in pools[n]:
                get_strategy(n).pack(r, pool, p)
    return {"questions": len(questions), "strategies": len(STRATEGIES), "seconds": _median(repack, repeats),
            "target": "<= 0.5 s"}
