"""The search half of the scale curve (``ragwb bench --only scale``): LanceDB's ANN index against
exact search on generated, seeded, normalised embedding-like vectors at 10k / 100k / 1M rows.

Vectors are a mixture around 2,000 seeded centres (real embeddings cluster by topic; uniform random
vectors are a worst case no index is built for). Each size runs in its own process so its peak RSS
is its own; vectors are generated and written in batches and exact search streams over the same
batches, so no full N x 384 matrix is ever held.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM, CENTRES, BATCH = 384, 2000, 100_000


def _centres(seed: int) -> np.ndarray:
    c = np.random.default_rng(seed).standard_normal((CENTRES, DIM)).astype(np.float32)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def _batch(start: int, n: int, seed: int, centres: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng([seed, start])
    v = centres[rng.integers(0, CENTRES, n)] + 0.05 * rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def measure(n: int, root: Path, seed: int = 7, queries: int = 100) -> dict:
    import lancedb
    import pyarrow as pa
    from lancedb.index import IvfHnswSq

    from rag.index.config import ANN_ROWS_PER_PARTITION
    from rag.index.retrieval import ANN_EF, ANN_NPROBES, ANN_REFINE

    centres = _centres(seed)
    db = lancedb.connect(str(root))
    t0 = time.perf_counter()
    table = None
    for s in range(0, n, BATCH):
        m = min(BATCH, n - s)
        data = pa.table({"row": pa.array(np.arange(s, s + m, dtype=np.int64)),
                         "vector": pa.FixedSizeListArray.from_arrays(pa.array(_batch(s, m, seed, centres).ravel()), DIM)})
        table = db.create_table("chunks", data=data) if table is None else table
        if s:
            table.add(data)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    table.create_index("vector", config=IvfHnswSq(distance_type="cosine",
                                                  num_partitions=max(1, n // ANN_ROWS_PER_PARTITION)))
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed + 1)
    q = centres[rng.integers(0, CENTRES, queries)] + 0.05 * rng.standard_normal((queries, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    best = [np.zeros(0, np.int64)] * queries  # exact top-10, streamed over the regenerated batches
    best_s = [np.zeros(0, np.float32)] * queries
    t0 = time.perf_counter()
    for s in range(0, n, BATCH):
        v = _batch(s, min(BATCH, n - s), seed, centres)
        sims = q @ v.T
        for i in range(queries):
            idx = np.concatenate([best[i], s + np.argpartition(-sims[i], 10)[:10]])
            sc = np.concatenate([best_s[i], sims[i][idx[len(best[i]):] - s]])
            top = np.argsort(-sc)[:10]
            best[i], best_s[i] = idx[top], sc[top]
    exact_ms = (time.perf_counter() - t0) * 1000 / queries
    lat, rec = [], []
    for i in range(queries):
        t = time.perf_counter()
        hits = (table.search(q[i]).distance_type("cosine").limit(10).nprobes(ANN_NPROBES)
                .refine_factor(ANN_REFINE).ef(max(ANN_EF, 10 * ANN_REFINE)).select(["row"]).to_list())
        lat.append((time.perf_counter() - t) * 1000)
        rec.append(len({h["row"] for h in hits} & set(best[i].tolist())) / 10)
    return {"rows": n, "write_s": round(write_s, 2), "index_build_s": round(build_s, 2),
            "ann_recall@10": round(float(np.mean(rec)), 4), "ann_p50_ms": round(float(np.percentile(lat, 50)), 2),
            "ann_p95_ms": round(float(np.percentile(lat, 95)), 2), "exact_streamed_ms": round(exact_ms, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def scale_curve(sizes: list[int]) -> dict:
    points = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="ragwb-scale-") as tmp:
            p = subprocess.run([sys.executable, "-m", "evals.bench.scale", str(n), tmp], capture_output=True, text=True)
            if p.returncode != 0:
                points.append({"rows": n, "error": p.stderr.strip().splitlines()[-1][:300]})
            else:
                points.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return {"points": points, "targets": "recall@10 >= 0.95 vs exact; peak RSS <= 4 GB at 1M"}


# ----------------------------------------------------------------- 5 strategies over a workspace index

CHUNKS_PER_PAGE, PAGES_PER_DOC = 5, 20


def build_index(n: int, root: Path, mode: str, seed: int = 7) -> tuple[str, object]:
    """A workspace index of ``n`` chunks written straight into LanceDB in batches (never all in
    memory): real text (the bundled squad2 chunks, cycled, with their analysed BM25 tokens) in
    documents of 20 pages x 5 chunks, and generated vectors (the seeded mixture above). ``mode``:
    the vector index (exact / ann). Returns (index name, workspace)."""
    import pyarrow as pa

    from rag.ingest.chunking import chunk_document
    from rag.ingest.corpora import load_bundled
    from rag.index.workspace import IndexConfig, Workspace
    from rag.index.rows import SCHEMAS, chunk_schema
    from rag.textproc import analyze
    from rag.tokens import count_tokens

    src = [c for d in load_bundled("squad2").documents for c in chunk_document(d)[0]]
    texts = [c.text for c in src]
    toks = [" ".join(analyze(c.embed_text, "en")) for c in src]
    ntok = [c.n_tokens for c in src]
    ws = Workspace(root)
    cfg = IndexConfig()
    index = ws.index_name(f"scale{n}", cfg)
    centres = _centres(seed)
    per_doc = CHUNKS_PER_PAGE * PAGES_PER_DOC
    made = {"chunks": False, "pages": False, "parents": False, "documents": False}

    def add(kind, rows, schema):
        data = pa.Table.from_pylist(rows, schema=schema)
        if not made[kind]:
            ws.db.create_table(f"{index}__{kind}", data=data, schema=schema, mode="overwrite")
            made[kind] = True
        else:
            ws.db.open_table(f"{index}__{kind}").add(data)

    step = 50_000  # rows per write: bounded memory while building
    for s0 in range(0, n, step):
        m = min(step, n - s0)
        vecs = _batch(s0, m, seed, centres)
        chunks, pages, docs = [], [], []
        for j in range(m):
            i = s0 + j
            d, pg = i // per_doc, (i % per_doc) // CHUNKS_PER_PAGE
            k = i % len(texts)
            doc_id, page_id = f"d{d:07d}", f"d{d:07d}#p{pg}"
            chunks.append({"chunk_id": f"c{i:08d}", "doc_id": doc_id, "page_id": page_id,
                           "chunk_index": i % per_doc, "start": 0, "end": len(texts[k]), "text": texts[k],
                           "n_tokens": ntok[k], "parent_id": page_id, "header_path": [], "breadcrumb": "",
                           "language": "en", "bm25_text": toks[k], "code_language": "", "symbol": "",
                           "kind": "", "line_start": 0, "line_end": 0, "vector": vecs[j]})
            if i % CHUNKS_PER_PAGE == CHUNKS_PER_PAGE - 1 or i == n - 1:
                body = " ".join(c["text"] for c in chunks[-CHUNKS_PER_PAGE:] if c["page_id"] == page_id)
                pages.append({"page_id": page_id, "doc_id": doc_id, "page_no": pg, "start": 0, "end": len(body),
                              "text": body, "n_tokens": count_tokens(body)})
            if i % per_doc == per_doc - 1 or i == n - 1:
                body = "\n".join(p["text"] for p in pages if p["doc_id"] == doc_id)
                docs.append({"doc_id": doc_id, "title": doc_id, "language": "en", "source_path": "",
                             "content_hash": doc_id, "n_pages": PAGES_PER_DOC, "n_tokens": count_tokens(body),
                             "text": body, "n_parents": PAGES_PER_DOC, "n_chunks": per_doc})
        add("chunks", chunks, chunk_schema(DIM))
        add("pages", pages, SCHEMAS["pages"])
        add("parents", [{"parent_id": p["page_id"], "doc_id": p["doc_id"], "page_id": p["page_id"], "start": 0,
                         "end": p["end"], "text": p["text"], "n_tokens": p["n_tokens"], "header_path": []}
                        for p in pages], SCHEMAS["parents"])
        add("documents", docs, SCHEMAS["documents"])
    ws._build_fts(index)
    kind, _ = ws._vector_index(index, mode, True)
    meta = {"index": index, "dataset": f"scale{n}", "config": cfg.to_dict(), "config_hash": cfg.hash, "dim": DIM,
            "vector_index": kind, "chunks": n}
    ws._write_json_table(index, "meta", [{"qid": "meta", "json": json.dumps(meta)}])
    return index, ws


def measure_strategies(root: Path, questions: int = 50, passes: int = 3) -> dict:
    """Per-question retrieval (question embedding share + search + packing) of all 5 strategies at
    their shipped budgets over the index built in ``root``, p50 / p95, and the peak RSS of this
    process (a fresh one: the build's memory is not counted); hybrid's BM25 through LanceDB's
    full-text index when the index is ANN (the in-memory BM25 would hold every token).

    Each question is timed ``passes`` times, every pass from scratch (no cached question vector,
    candidate pool, text or page vector), and its time is the fastest pass: timeit's rule, since on a
    shared 2-core VM noise only ever adds (two identical single passes at 1M measured 119 and 181 ms)."""
    from rag.ingest.corpora import load_bundled
    from rag.index.workspace import Workspace
    from rag.index.retrieval import Retriever
    from rag.strategies import STRATEGIES, get_strategy, make_params

    ws = Workspace(root)
    index = ws.indexes()[0]["index"]
    qs = [q.text for q in load_bundled("squad2").questions[:questions]]
    t0 = time.perf_counter()
    r = Retriever(ws, index, cache_queries=False)
    open_s = time.perf_counter() - t0
    ann = r.reader.vectors is None
    params = {name: make_params(name, **({"bm25_backend": "lancedb"} if name == "hybrid" and ann else {}))
              for name in STRATEGIES if not getattr(STRATEGIES[name], "opt_in", False)}
    lat = np.full(len(qs), np.inf)
    for _ in range(max(1, passes)):
        r._pools.clear()
        r.reader.clear_row_caches()
        for i, q in enumerate(qs):
            t = time.perf_counter()
            for name, p in params.items():
                get_strategy(name).retrieve(r, q, p)
            lat[i] = min(lat[i], (time.perf_counter() - t) * 1000)
    return {"mode": "ann" if ann else "exact", "open_s": round(open_s, 2), "questions": len(qs), "passes": passes,
            "p50_ms": round(float(np.percentile(lat, 50)), 1), "p95_ms": round(float(np.percentile(lat, 95)), 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _build(n: int, root: Path, mode: str) -> dict:
    t0 = time.perf_counter()
    build_index(n, root, mode)
    return {"build_s": round(time.perf_counter() - t0, 1),
            "build_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def python_json(args: list[str], what: str) -> dict:
    """``python ARGS`` in a fresh process (its memory and timings its own); the JSON object on its
    last stdout line. A failure is a RuntimeError "WHAT: <its last stderr line>"."""
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{what}: " + (p.stderr.strip().splitlines() or ["?"])[-1][:300])
    return json.loads(p.stdout.strip().splitlines()[-1])


def strategies_curve(sizes: list[tuple[int, str]], questions: int = 50) -> dict:
    """Each size: the index built in one process, the 5 strategies measured in a second one."""
    points = []
    for n, mode in sizes:
        with tempfile.TemporaryDirectory(prefix="ragwb-scale5-") as tmp:
            pt = {"rows": n, "mode": mode}
            for step in (["build", str(n), tmp, mode], ["query", tmp, str(questions)]):
                try:
                    pt.update(python_json(["-m", "evals.bench.scale", *step], step[0]))
                except RuntimeError as e:
                    pt["error"] = str(e)
                    break
            points.append(pt)
    return {"points": points, "targets": "at 1M: 5-strategy retrieval <= 2x its time at 10k; peak RSS <= 4 GB"}


if __name__ == "__main__":
    if sys.argv[1] == "build":
        print(json.dumps(_build(int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])))
    elif sys.argv[1] == "query":
        print(json.dumps(measure_strategies(Path(sys.argv[2]), int(sys.argv[3]))))
    else:
        print(json.dumps(measure(int(sys.argv[1]), Path(sys.argv[2]))))
