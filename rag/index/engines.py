"""Execution engines for ingest: where parsing, chunking and embedding run (``--engine NAME``).

* ``local`` (default): in this process.
* ``ray``: a Ray Data pipeline on a Ray cluster (``--engine ray [--address ADDR]``, docs/scale.md).
  Files are parsed in ``map_batches`` tasks, documents chunked in ``map_batches`` tasks, chunks
  embedded by an actor pool (the embedder loaded once per actor, one GPU per actor when the cluster
  has GPUs and the embedder can use one), and the chunk rows with their vectors written straight into
  the workspace's Lance table through ``lance-ray``: the driver never holds the vectors.

Both engines give the same tables: same chunk ids, texts and token counts (chunking is the same
code), vectors equal within float tolerance (batches differ), and the same commit protocol (a
document's ``documents`` row is written after all its other rows). The content-hash embedding cache
(``WORKSPACE/cache/embeddings.sqlite``) is read and filled by the embedding actors, so a chunk embedded
once is never embedded again, whichever engine ran. The evaluation half of the engines is in
``evals/run/engines.py``.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable

from rag.ingest.parse_pool import doc_from_dict, doc_to_dict  # one document wire form: the pool's and Ray's

ENGINES: dict[str, Callable[..., "Engine"]] = {}


def register_engine(name: str):
    def deco(cls):
        ENGINES[name] = cls
        cls.name = name
        return cls
    return deco


def get_engine(name: str = "local", address: str | None = None, **kw) -> "Engine":
    if isinstance(name, Engine):
        return name
    if name not in ENGINES:
        raise KeyError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")
    return ENGINES[name](address=address, **kw)


class Engine:
    name = "base"

    def __init__(self, address: str | None = None, **_):
        self.address = address

    def describe(self) -> str:
        return self.name


@register_engine("local")
class LocalEngine(Engine):
    """Everything in this process (rag/index/workspace.py ``Workspace._ingest_here``)."""


# ------------------------------------------------------------------------------------------- Ray

RAY_NAMESPACE = "ragwb"


def ensure_ray(address: str | None = None, num_cpus: int | None = None):
    """Connect to the cluster at ``address`` (or ``RAY_ADDRESS``), or start a local runtime; reuse
    the runtime this process already has."""
    try:
        import ray
    except ImportError as e:  # the optional extra
        raise ImportError("--engine ray needs the optional extra: pip install 'rag-workbench[ray]'") from e
    import warnings

    # Ray starts its processes with fork+exec (nothing of lancedb's state survives the exec)
    warnings.filterwarnings("ignore", message="lancedb fork support is experimental")
    if not ray.is_initialized():
        kw = dict(namespace=RAY_NAMESPACE, log_to_driver=False, include_dashboard=False,
                  configure_logging=True, logging_level=logging.WARNING)
        if address or os.environ.get("RAY_ADDRESS"):
            kw["address"] = address or os.environ["RAY_ADDRESS"]
        elif num_cpus:
            kw["num_cpus"] = num_cpus
        ray.init(**kw)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # our own summary says what happened; Ray's bars flood CI logs
    ctx.print_on_execution_start = False
    for name in ("ray.data", "ray"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return ray


def _parse_batch(batch: dict, language: str | None, cache_root: str | None, shipped: str | None) -> dict:
    """Ray task: parse files (one bad file is a skip row, never a failed task)."""
    from rag.ingest.readers import ParseCache, parse_one

    cache = ParseCache(cache_root, shipped) if (cache_root or shipped) else None
    out = {"path": [], "doc": [], "skip": [], "seconds": []}
    for path, doc_id in zip(batch["path"], batch["doc_id"]):
        doc, skip, secs = parse_one(Path(path), str(doc_id), language, cache)
        out["path"].append(str(path))
        out["doc"].append(json.dumps(doc_to_dict(doc), ensure_ascii=False) if doc else "")
        out["skip"].append(json.dumps(skip.__dict__, ensure_ascii=False) if skip else "")
        out["seconds"].append(secs)
    return out


def _chunk_batch(batch: dict, chunking: dict, embedder: dict | None = None) -> dict:
    """Ray task: chunk documents. One output row per document: its parents (JSON), its chunk rows
    (JSON, with the text to embed), their counts, and the chunks longer than the embedder reads
    ((chunk_id, tokens) JSON: the driver reports them as the local engine does)."""
    from rag.ingest.chunking import ChunkConfig, chunk_document
    from .embedders import EmbedderConfig, get_embedder
    from .rows import chunk_row, parent_row

    cfg = ChunkConfig(**chunking)
    emb = get_embedder(EmbedderConfig(**embedder)) if embedder else None
    cap = emb.max_tokens if emb is not None else None
    out = {"doc_id": [], "parents": [], "chunks": [], "n_parents": [], "n_chunks": [], "over": []}
    for blob in batch["doc"]:
        d = doc_from_dict(json.loads(blob))
        chunks, parents = chunk_document(d, cfg)
        rows = []
        for c in chunks:
            r = chunk_row(c, d.language)
            r["_embed"] = c.embed_text
            rows.append(r)
        out["doc_id"].append(d.doc_id)
        out["parents"].append(json.dumps([parent_row(p) for p in parents], ensure_ascii=False))
        out["chunks"].append(json.dumps([json.dumps(r, ensure_ascii=False) for r in rows]))
        out["n_parents"].append(len(parents))
        out["n_chunks"].append(len(chunks))
        counts = emb.count_tokens([c.embed_text for c in chunks]) if cap and chunks else None
        out["over"].append(json.dumps([(c.chunk_id, n) for c, n in zip(chunks, counts or []) if n > cap]))
    return out


def _explode_chunks(row: dict) -> list[dict]:
    return [{"row": r} for r in json.loads(row["chunks"])]  # each row stays the JSON the chunk task wrote


class _EmbedActor:
    """Ray actor: the embedder is loaded once per actor; the workspace's content-hash cache is read
    before embedding and filled after, so cached chunks cost nothing."""

    def __init__(self, embedder: dict, cache_path: str):
        from .embedders import EmbedderConfig, EmbeddingCache, get_embedder

        self.cfg = EmbedderConfig(**embedder)
        self.emb = get_embedder(self.cfg)
        self.cache = EmbeddingCache(cache_path)

    def __call__(self, batch: dict):
        import numpy as np
        import pyarrow as pa

        from .rows import chunk_schema

        rows = [json.loads(r) for r in batch["row"]]
        vecs = self.cache.embed(self.emb, self.cfg.key, [r.pop("_embed") for r in rows], "passage")
        for r, v in zip(rows, vecs):
            r["vector"] = np.asarray(v, np.float32)
        return pa.Table.from_pylist(rows, schema=chunk_schema(int(vecs.shape[1])))


@register_engine("ray")
class RayEngine(Engine):
    """Ray Data pipeline: parse -> chunk -> embed (actor pool) -> lance-ray write."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None, actors: int = 0,
                 batch_size: int = 64, **_):
        super().__init__(address)
        self.num_cpus, self.batch_size = num_cpus, batch_size
        self.actors = actors  # embedding actors (0 = one per CPU of the cluster, GPUs permitting)
        self.stats: dict = {}

    def ray(self):
        return ensure_ray(self.address, self.num_cpus)

    def describe(self) -> str:
        s = self.stats
        if not s:
            return "ray"
        return (f"ray ({s.get('actors', 0)} embedding actor(s){', 1 GPU each' if s.get('gpus') else ''}, "
                f"{s.get('cpus', 0):g} CPUs in the cluster)")

    # parsing: map_batches over files ------------------------------------------------------------
    def parse_files(self, files: list[tuple[Path, str]], language: str | None, cache) -> tuple[list, list, dict]:
        from rag.models import Skipped

        ray = self.ray()
        items = [{"path": str(p), "doc_id": d} for p, d in files]
        root = str(cache.root) if (cache is not None and cache.root) else None
        shipped = str(cache.shipped) if cache is not None else None
        out = (ray.data.from_items(items, override_num_blocks=max(1, min(len(items), 64)))
               .map_batches(_parse_batch, batch_size=1, batch_format="numpy",
                            fn_kwargs={"language": language, "cache_root": root, "shipped": shipped})
               .take_all())
        by_path = {r["path"]: r for r in out}
        docs, skipped, seconds = [], [], {}
        for p, _ in files:  # the order of the file list, whatever order the tasks finished in
            r = by_path[str(p)]
            seconds[str(p)] = float(r["seconds"])
            if r["doc"]:
                docs.append(doc_from_dict(json.loads(r["doc"])))
            else:
                skipped.append(Skipped(**json.loads(r["skip"])))
        return docs, skipped, seconds

    # chunk -> embed -> write ---------------------------------------------------------------------
    def ingest_chunks(self, ws, index: str, changed: list, stale: list[str], cfg, summ, progress: bool) -> int:
        """Write the changed documents' rows (at least one; with none the caller syncs locally) with the
        commit protocol of the local engine: stale rows out first, then pages, parents and chunks, the
        documents rows last."""
        import dataclasses

        import lance_ray

        from .embedders import get_embedder
        from .rows import SCHEMAS, chunk_schema, document_row, page_rows

        ray = self.ray()
        res = ray.cluster_resources()
        cpus, gpus = float(res.get("CPU", 1)), float(res.get("GPU", 0))
        use_gpu = gpus > 0 and cfg.embedder.name in GPU_EMBEDDERS
        n_actors = self.actors or max(1, int(gpus if use_gpu else cpus))
        self.stats = {"cpus": cpus, "gpus": use_gpu, "actors": n_actors}

        ws._sync_table(index, "documents", [], stale, SCHEMAS["documents"])
        ws._sync_table(index, "pages", [r for d in changed for r in page_rows(d, cfg)], stale, SCHEMAS["pages"])
        docs = [json.dumps(doc_to_dict(d), ensure_ascii=False) for d in changed]
        chunked = (ray.data.from_items([{"doc": x} for x in docs], override_num_blocks=max(1, min(len(docs), 64)))
                   .map_batches(_chunk_batch, batch_size=8, batch_format="numpy",
                                fn_kwargs={"chunking": dataclasses.asdict(cfg.chunking),
                                           "embedder": dataclasses.asdict(cfg.embedder)})
                   .materialize())  # in the object store: the driver reads parents and counts only
        meta = chunked.select_columns(["doc_id", "parents", "n_parents", "n_chunks", "over"]).take_all()
        summ.note_over_window_counts(get_embedder(cfg.embedder), sum(int(r["n_chunks"]) for r in meta),
                                     [(c, n) for r in meta for c, n in json.loads(r["over"])])
        counts = {r["doc_id"]: (int(r["n_parents"]), int(r["n_chunks"])) for r in meta}
        ws._sync_table(index, "parents", [p for r in meta for p in json.loads(r["parents"])], stale,
                       SCHEMAS["parents"])
        n_chunks = sum(n for _, n in counts.values())
        te = time.perf_counter()
        before = ws.embedding_cache.size()
        exists = ws.has_table(f"{index}__chunks")
        if exists:
            ws._sync_table(index, "chunks", [], stale, None)
        dim = ws._dim(index)
        if n_chunks:
            vectors = (chunked.select_columns(["chunks"]).flat_map(_explode_chunks)
                       .map_batches(_EmbedActor, batch_size=self.batch_size, batch_format="numpy",
                                    compute=ray.data.ActorPoolStrategy(min_size=1, max_size=n_actors),
                                    num_gpus=1 if use_gpu else 0, num_cpus=0 if use_gpu else 1,
                                    fn_constructor_kwargs={"embedder": dataclasses.asdict(cfg.embedder),
                                                           "cache_path": str((ws.root / "cache" /
                                                                              "embeddings.sqlite").resolve())}))
            lance_ray.write_lance(vectors, ws.table_uri(index, "chunks"), mode="append" if exists else "create",
                                  max_rows_per_file=1 << 20)
            dim = int(ws.table(index, "chunks").schema.field("vector").type.list_size)
        elif not exists:
            dim = dim or _embedder_dim(cfg)
            ws._sync_table(index, "chunks", [], [], chunk_schema(dim))
        summ.embed_seconds = time.perf_counter() - te
        summ.embedded = ws.embedding_cache.size() - before  # distinct texts actually embedded
        summ.cache_hits = n_chunks - summ.embedded
        if n_chunks:
            per_file = {}
            for d in changed:
                per_file[d.source_path] = per_file.get(d.source_path, 0) + counts.get(d.doc_id, (0, 0))[1]
            summ.file_embed_seconds = {f: summ.embed_seconds * n / n_chunks for f, n in per_file.items()}
        ws._sync_table(index, "documents", [document_row(d, cfg, *counts[d.doc_id]) for d in changed], [],
                       SCHEMAS["documents"])
        return dim


GPU_EMBEDDERS = {"st"}  # embedders that run on a GPU when one is there (e5 and use are numpy, CPU only)


def _embedder_dim(cfg) -> int:
    from .embedders import get_embedder

    return int(get_embedder(cfg.embedder).dim or 1)
