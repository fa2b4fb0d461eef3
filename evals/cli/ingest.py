"""``ragwb ingest`` and ``ragwb search``: corpora into the LanceDB workspace, and one query through one strategy."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .common import (add_folder_args, add_index_args, at_least, engine_address, folder_filters, index_config,
                     non_negative_float, parse_sets)


def cmd_ingest(a) -> int:
    from rag.index.workspace import Workspace

    from rag.index.engines import get_engine

    ws = Workspace(a.workspace)
    engine = get_engine(a.engine, engine_address(a))
    status = 0
    for spec in a.dataset:
        questions = a.questions
        if questions is None and Path(spec).is_dir():
            questions = ws.remembered_questions(spec)
            if questions:
                print(f"using the questions file remembered for {spec}: {questions}", file=sys.stderr)
        ds = ws.load(spec, questions, index_config(a), progress=not a.no_progress, wait=a.wait,
                     follow_symlinks=a.follow_symlinks, insert_fillers=a.insert_fillers, engine=engine,
                     **folder_filters(a))
        summ = ws.ingest(ds, index_config(a), progress=not a.no_progress, wait=a.wait, vector_index=a.vector_index,
                         engine=engine)
        if a.questions and Path(spec).is_dir():
            ws.remember_questions(spec, a.questions)
        print(summ.render())
        if a.strict and (summ.skipped or (questions and not ds.questions)):
            if questions and not ds.questions:
                print(f"ragwb ingest: --strict: {questions} holds no usable question", file=sys.stderr)
            status = 3
    return status


def cmd_search(a) -> int:
    """One query through one strategy over an ingested (or now ingested) dataset: the blocks it would pack, with
    where each comes from (file, lines, symbol) and its score: a look at retrieval without a run."""
    from rag.index.workspace import Workspace
    from rag.index.retrieval import Retriever
    from rag.strategies import get_strategy, make_params

    ws = Workspace(a.workspace)
    cfg = index_config(a)
    kw = {}
    for k, v in parse_sets([f"{a.strategy}.{x}" for x in a.set or []]).get(a.strategy, {}).items():
        if len(v) != 1:  # one query, one point: a grid is `ragwb run`'s
            raise ValueError(f"--set {k}: search takes one value per budget, got {len(v)}")
        kw[k] = v[0]
    if a.where:
        kw["where"] = a.where
    params = make_params(a.strategy, **kw)  # an unknown budget, field or kind errors here, before any ingest
    index = _current_index(ws, a, cfg)
    if index is not None:  # the folder is as it was indexed: answer from the index (no read, no parse)
        return _print_search(a, kw, Retriever(ws, index), params)
    ds = ws.load(a.dataset, None, cfg, progress=not a.no_progress, **folder_filters(a))
    if not ws.has_table(ws.index_name(ds.name, cfg) + "__meta"):
        # a search is a look, never a silent full ingest under another embedder (tens of minutes of e5)
        others = sorted({m["config"]["embedder"]["name"] for m in ws.indexes()
                         if m.get("dataset") == ds.name and (m.get("config") or {}).get("embedder")})
        n = ws.chunks_to_embed(ds, cfg) if others else 0
        if n:  # (shipped vectors embed nothing: then the index is simply built)
            raise ValueError(f"{ds.name} is indexed here with --embedder {', '.join(others)}, not "
                             f"{cfg.embedder.name}: pass --embedder {others[0]} to search that index (or "
                             f"`ragwb ingest {a.dataset} --embedder {cfg.embedder.name}` first: {n:,} chunks to embed)")
    summ = ws.ingest(ds, cfg, progress=not a.no_progress)
    return _print_search(a, kw, Retriever(ws, summ.index), params)


def _current_index(ws, a, cfg) -> str | None:
    """The index ``ragwb search`` can answer from without reading the dataset: a folder whose files are as the
    last ingest recorded them (rag/index/freshness.py), or a bundled set indexed by this chunker. None: read it
    (and say why, when an index exists)."""
    from rag.index.freshness import stale_reason
    from rag.ingest.corpora import BUNDLED

    if a.refresh or any(v is not None for v in folder_filters(a).values()):
        return None
    spec = a.dataset
    if Path(spec).is_dir():
        index = ws.index_name(ws.dataset_name(spec), cfg)
        if not ws.has_table(index + "__meta"):
            return None
        why = stale_reason(ws.root, index, str(Path(spec).resolve()), ws.remembered_filters(spec))
    elif spec in BUNDLED:
        index = ws.index_name(spec, cfg)
        if not ws.has_table(index + "__meta"):
            return None
        why = stale_reason(ws.root, index, spec, {})
    else:
        return None
    if why:
        print(f"ragwb search: reading {spec} again ({why})", file=sys.stderr)
        return None
    return index


def _print_search(a, kw: dict, r, params) -> int:
    from rag.strategies import look

    from rag.safeio import printable  # file names and text from outside: terminal escapes shown, never sent

    ctx, rows = look(r, a.strategy, a.query, **dataclasses.asdict(params))
    print(printable(f"{a.strategy} ({', '.join(f'{k}={v}' for k, v in sorted(kw.items())) or 'defaults'}) over "
                    f"{r.index}: {len(ctx.blocks)} blocks, {sum(b.n_tokens for b in ctx.blocks):,} tokens"))
    for x in rows[:a.show]:
        print(f"{x['rank']:3d}. {x['score']:7.3f}  {printable(str(x['group'])):9s} {printable(str(x['where']))}  "
              f"[{x['tokens']} tokens]\n       {printable(str(x['text']))}")
    return 0


def add_ingest(sub) -> None:
    s = sub.add_parser("ingest", help="load corpora and gold sets into the LanceDB workspace",
                       description="Import a dataset (bundled name, SQuAD-style JSON, or a folder of "
                       ".md/.txt/.pdf/.docx/.html files), chunk it, embed it and write the LanceDB index. "
                       "Re-ingesting unchanged files embeds nothing; changed files replace their rows. Bad files "
                       "are skipped with a reason and listed in the summary. PDFs are read by pdfium "
                       "(RAGWB_PDF_PARSER=pypdf for pypdf) in worker processes (RAGWB_PARSE_WORKERS=N, 0: in this "
                       "process; RAGWB_PARSE_TIMEOUT=SECONDS a file, default 600; docs/datasets.md).")
    s.add_argument("dataset", nargs="+", help="bundled name (squad2, xquad-en, xquad-el, xquad-ru, docugami, mtrag-govt, mtrag-clapnq), "
                   "a SQuAD-style .json/.json.gz, or a folder")
    s.add_argument("--questions", default=None, help="JSONL gold questions for a folder (docs/datasets.md)")
    s.add_argument("--strict", action="store_true", help="exit 3 when any file or gold line was skipped")
    s.add_argument("--insert-fillers", type=non_negative_float, default=0.0, metavar="RATE",
                   help="conversational sets: insert seeded filler turns at this rate (default 0)")
    add_index_args(s)
    add_folder_args(s)
    s.set_defaults(fn=cmd_ingest)


def add_search(sub) -> None:
    s = sub.add_parser("search", help="one query through one strategy: the blocks it packs, with file, lines and "
                                      "symbol (no run stored)",
                       description="Look at retrieval directly: the blocks a strategy returns for QUERY over a "
                                   "dataset or folder (ingested first if needed), e.g. ragwb search "
                                   "'HelpFormatter.write_dl' --dataset ./click --where kind=method.")
    s.add_argument("query", help="the question or search text")
    s.add_argument("--dataset", required=True, help="bundled set name or a folder")
    s.add_argument("--strategy", default="hybrid", help="strategy name (default hybrid; see `ragwb strategies`)")
    s.add_argument("--where", default="", metavar="FIELD=GLOB",
                   help="only chunks whose kind, symbol, file or language match, e.g. kind=method or "
                        "'file=src/*.py;symbol=Parser.*'")
    s.add_argument("--set", action="append", metavar="PARAM=V", help="a budget of the strategy, e.g. top_k=10")
    s.add_argument("--show", type=at_least(1), default=10, help="blocks printed (default 10)")
    s.add_argument("--refresh", action="store_true",
                   help="read the folder again even when its files look as the last ingest left them (by default "
                        "a folder whose files' sizes and times are unchanged is answered from its index)")
    add_index_args(s)
    add_folder_args(s)
    s.set_defaults(fn=cmd_search)
