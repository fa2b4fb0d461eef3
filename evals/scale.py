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

    from rag.index import ANN_ROWS_PER_PARTITION
    from rag.retrieval import ANN_EF, ANN_NPROBES, ANN_REFINE

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
            p = subprocess.run([sys.executable, "-m", "evals.scale", str(n), tmp], capture_output=True, text=True)
            if p.returncode != 0:
                points.append({"rows": n, "error": p.stderr.strip().splitlines()[-1][:300]})
            else:
                points.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return {"points": points, "targets": "recall@10 >= 0.95 vs exact; peak RSS <= 4 GB at 1M"}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), Path(sys.argv[2]))))
