"""Vectors shipped with the bundled sets (``datasets/vectors/``), so a fresh workspace embeds nothing.

``scripts/build_datasets.py`` writes, per bundled set, the e5 vectors of every chunk (default
chunking) and every question (default query template) as a parquet file: column ``k`` = the
embedding cache key (sha256 of embedder key, kind and text, 32 bytes), column ``v`` = the vector as
float16 bytes. ``MANIFEST.json`` records each file's sha256, the embedder key and the row count.

Ingest seeds the workspace's embedding cache from the file of a bundled set when the embedder
matches; a different embedder or chunking simply misses the keys and is embedded (and said so); a
file whose checksum does not match is ignored with a warning.
"""
from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np

from rag.ingest.readers import datasets_dir

MANIFEST = "MANIFEST.json"


def vectors_dir() -> Path:
    return datasets_dir() / "vectors"


def manifest() -> dict:
    try:
        return json.loads((vectors_dir() / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def seed_cache(cache, dataset: str, embedder_key: str) -> str | None:
    """Seed ``cache`` (an EmbeddingCache) with the shipped vectors of ``dataset``. Returns a one-line
    notice when the shipped vectors cannot be used, else None."""
    entry = manifest().get(dataset)
    if not entry:
        return None
    if entry["embedder_key"] != embedder_key:
        return (f"shipped vectors of {dataset} are for embedder {entry['embedder_key'].split('|')[0]!r}; "
                f"embedding with {embedder_key.split('|')[0]!r}")
    if cache.is_seeded(entry["sha256"]):  # seeded before: not read or hashed again on every ingest
        return None
    path = vectors_dir() / entry["file"]
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"shipped vectors {path} unreadable ({e.strerror}); embedding instead"
    sha = hashlib.sha256(data).hexdigest()
    if sha != entry["sha256"]:
        return f"warning: shipped vectors {path} fail their checksum; ignored, embedding instead"
    import pyarrow.parquet as pq

    t = pq.read_table(io.BytesIO(data))
    keys = [k.hex() for k in t.column("k").to_pylist()]
    dim = int(entry["dim"])
    raw = b"".join(t.column("v").to_pylist())
    vecs = np.frombuffer(raw, dtype=np.float16).reshape(-1, dim).astype(np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)  # float16 round trip: renormalise
    cache.seed(keys, vecs, sha)
    return None


def write_vectors(cache_rows: list[tuple[str, np.ndarray]], out: Path) -> dict:
    """Write (key hex, vector) rows as the shipped parquet file; returns its manifest entry fields."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted(cache_rows)
    dim = int(rows[0][1].shape[0]) if rows else 0
    t = pa.table({"k": pa.array([bytes.fromhex(k) for k, _ in rows], pa.binary(32)),
                  "v": pa.array([v.astype(np.float16).tobytes() for _, v in rows], pa.binary(2 * dim))})
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd", use_dictionary=False, write_statistics=False)
    out.write_bytes(buf.getvalue())
    return {"file": out.name, "sha256": hashlib.sha256(buf.getvalue()).hexdigest(), "rows": len(rows), "dim": dim}
