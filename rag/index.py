"""The LanceDB workspace: documents, pages, parents and chunks tables per index.

An *index* is one dataset under one ``IndexConfig`` (chunking + embedder); its tables
are named ``<dataset>__<hash8>__<kind>`` so indexes with different configs live side
by side. Ingest is a sync: an unchanged document (same content hash) is left alone,
a changed one has its rows replaced, a vanished one is removed. Chunks carry a
``bm25_text`` column (language-aware analysed tokens) with a LanceDB full-text index.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from .chunking import ChunkConfig, chunk_document
from .corpora import slug
from .embedders import EmbedderConfig, EmbeddingCache, get_embedder
from .models import Dataset, Question
from .textproc import analyze
from .tokens import count_tokens

DEFAULT_WORKSPACE = Path("results")

_STR, _INT = pa.string(), pa.int64()
SCHEMAS = {
    "documents": pa.schema([("doc_id", _STR), ("title", _STR), ("language", _STR), ("source_path", _STR),
                            ("content_hash", _STR), ("n_pages", _INT), ("n_tokens", _INT), ("text", _STR)]),
    "pages": pa.schema([("page_id", _STR), ("doc_id", _STR), ("page_no", _INT), ("start", _INT), ("end", _INT),
                        ("text", _STR), ("n_tokens", _INT)]),
    "parents": pa.schema([("parent_id", _STR), ("doc_id", _STR), ("page_id", _STR), ("start", _INT),
                          ("end", _INT), ("text", _STR), ("n_tokens", _INT), ("header_path", pa.list_(_STR))]),
}


def chunk_schema(dim: int) -> pa.Schema:
    return pa.schema([("chunk_id", _STR), ("doc_id", _STR), ("page_id", _STR), ("chunk_index", _INT),
                      ("start", _INT), ("end", _INT), ("text", _STR), ("n_tokens", _INT), ("parent_id", _STR),
                      ("header_path", pa.list_(_STR)), ("breadcrumb", _STR), ("language", _STR),
                      ("bm25_text", _STR), ("vector", pa.list_(pa.float32(), dim))])


@dataclass(frozen=True)
class IndexConfig:
    chunking: ChunkConfig = field(default_factory=ChunkConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:8]

    @classmethod
    def from_dict(cls, d: dict) -> "IndexConfig":
        return cls(ChunkConfig(**d["chunking"]), EmbedderConfig(**d["embedder"]))


@dataclass
class IngestSummary:
    dataset: str
    index: str
    documents: int = 0
    pages: int = 0
    chunks: int = 0
    tokens: int = 0
    questions: int = 0
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    removed: int = 0
    embedded: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    skipped: list = field(default_factory=list)

    def render(self) -> str:
        lines = [
            f"ingested {self.dataset} into index {self.index}",
            f"  documents {self.documents} (added {self.added}, replaced {self.replaced}, unchanged {self.unchanged}, "
            f"removed {self.removed})",
            f"  pages {self.pages}  chunks {self.chunks}  tokens {self.tokens}  questions {self.questions}",
            f"  embedded {self.embedded} chunks ({self.cache_hits} from cache) in {self.embed_seconds:.1f}s; "
            f"total {self.seconds:.1f}s",
        ]
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)}:")
            lines += [f"    - {s}" for s in self.skipped]
        else:
            lines.append("  skipped 0")
        return "\n".join(lines)


class Workspace:
    """A folder holding ``lancedb/`` (the indexes) and caches."""

    def __init__(self, root: str | Path = DEFAULT_WORKSPACE):
        import lancedb

        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.db = lancedb.connect(str(self.root / "lancedb"))
        self._emb_cache: EmbeddingCache | None = None

    @property
    def embedding_cache(self) -> EmbeddingCache:
        if self._emb_cache is None:
            self._emb_cache = EmbeddingCache(self.root / "cache" / "embeddings.sqlite")
        return self._emb_cache

    def index_name(self, dataset: str, cfg: IndexConfig) -> str:
        return f"{slug(dataset)}__{cfg.hash}"

    def table_names(self) -> list[str]:
        res = self.db.list_tables()
        return list(getattr(res, "tables", res))

    def has_table(self, name: str) -> bool:
        return name in self.table_names()

    def table(self, index: str, kind: str):
        return self.db.open_table(f"{index}__{kind}")

    def indexes(self) -> list[dict]:
        out = []
        for t in sorted(self.table_names()):
            if t.endswith("__meta"):
                rows = self.db.open_table(t).to_arrow().to_pylist()
                if rows:
                    out.append(json.loads(rows[0]["json"]))
        return out

    def meta(self, index: str) -> dict:
        rows = self.table(index, "meta").to_arrow().to_pylist()
        return json.loads(rows[0]["json"])

    def questions(self, index: str) -> list[Question]:
        rows = self.table(index, "questions").to_arrow().to_pylist()
        return [Question.from_dict(json.loads(r["json"])) for r in rows]

    # ------------------------------------------------------------------ ingest
    def ingest(self, ds: Dataset, cfg: IndexConfig = IndexConfig(), progress: bool = True) -> IngestSummary:
        t0 = time.perf_counter()
        index = self.index_name(ds.name, cfg)
        summ = IngestSummary(ds.name, index, skipped=[str(s) for s in ds.skipped])
        existing: dict[str, str] = {}
        if self.has_table(f"{index}__documents"):
            for r in self.table(index, "documents").to_arrow().select(["doc_id", "content_hash"]).to_pylist():
                existing[r["doc_id"]] = r["content_hash"]
        current = {d.doc_id: d for d in ds.documents}
        changed = [d for d in ds.documents if existing.get(d.doc_id) != d.content_hash]
        removed = [i for i in existing if i not in current]
        summ.added = sum(1 for d in changed if d.doc_id not in existing)
        summ.replaced = len(changed) - summ.added
        summ.unchanged = len(ds.documents) - len(changed)
        summ.removed = len(removed)

        doc_rows, page_rows, parent_rows, chunk_rows = [], [], [], []
        for d in changed:
            chunks, parents = chunk_document(d, cfg.chunking)
            doc_rows.append({"doc_id": d.doc_id, "title": d.title, "language": d.language,
                             "source_path": d.source_path, "content_hash": d.content_hash,
                             "n_pages": len(d.pages), "n_tokens": count_tokens(d.text, cfg.chunking.encoding),
                             "text": d.text})
            for p in d.pages:
                page_rows.append({"page_id": p.page_id, "doc_id": d.doc_id, "page_no": p.page_no,
                                  "start": p.start, "end": p.end, "text": p.text,
                                  "n_tokens": count_tokens(p.text, cfg.chunking.encoding)})
            for p in parents:
                parent_rows.append({"parent_id": p.parent_id, "doc_id": p.doc_id, "page_id": p.page_id,
                                    "start": p.start, "end": p.end, "text": p.text, "n_tokens": p.n_tokens,
                                    "header_path": p.header_path})
            for c in chunks:
                chunk_rows.append({"chunk_id": c.chunk_id, "doc_id": c.doc_id, "page_id": c.page_id,
                                   "chunk_index": c.chunk_index, "start": c.start, "end": c.end, "text": c.text,
                                   "n_tokens": c.n_tokens, "parent_id": c.parent_id, "header_path": c.header_path,
                                   "breadcrumb": c.breadcrumb, "language": d.language,
                                   "bm25_text": " ".join(analyze(c.embed_text, d.language)),
                                   "_embed": c.embed_text})

        emb = get_embedder(cfg.embedder)
        texts = [r.pop("_embed") for r in chunk_rows]
        te = time.perf_counter()
        m0 = self.embedding_cache.misses
        bar = _progress(len(texts), f"embedding {ds.name}", progress)
        vecs = self.embedding_cache.embed(emb, cfg.embedder.key, texts, "passage", progress=bar.update if bar else None)
        if bar:
            bar.close()
        summ.embed_seconds = time.perf_counter() - te
        summ.embedded = self.embedding_cache.misses - m0  # distinct texts actually embedded
        summ.cache_hits = len(texts) - summ.embedded
        for r, v in zip(chunk_rows, vecs):
            r["vector"] = v

        stale = [d.doc_id for d in changed if d.doc_id in existing] + removed
        dim = int(vecs.shape[1]) if len(vecs) else self._dim(index) or emb.dim
        for kind, rows, schema in (("documents", doc_rows, SCHEMAS["documents"]),
                                   ("pages", page_rows, SCHEMAS["pages"]),
                                   ("parents", parent_rows, SCHEMAS["parents"]),
                                   ("chunks", chunk_rows, chunk_schema(dim))):
            self._sync_table(index, kind, rows, stale, schema)
        if changed or removed or not self.has_table(f"{index}__meta"):
            self._build_fts(index)
        self._write_json_table(index, "questions", [{"qid": q.qid, "json": json.dumps(q.to_dict(), ensure_ascii=False)}
                                                     for q in ds.questions])
        # totals for the whole index (not just what changed)
        docs_t = self.table(index, "documents").to_arrow().select(["n_pages", "n_tokens"])
        summ.documents = docs_t.num_rows
        summ.pages = int(pa.compute.sum(docs_t["n_pages"]).as_py() or 0)
        summ.tokens = int(pa.compute.sum(docs_t["n_tokens"]).as_py() or 0)
        summ.chunks = self.table(index, "chunks").count_rows()
        summ.questions = len(ds.questions)
        meta = {"index": index, "dataset": ds.name, "config": cfg.to_dict(), "config_hash": cfg.hash,
                "dim": dim, "documents": summ.documents,
                "pages": summ.pages, "chunks": summ.chunks, "tokens": summ.tokens, "questions": summ.questions,
                "skipped": summ.skipped}
        self._write_json_table(index, "meta", [{"qid": "meta", "json": json.dumps(meta)}])
        summ.seconds = time.perf_counter() - t0
        return summ

    def _dim(self, index: str) -> int:
        try:
            return int(self.meta(index)["dim"])
        except Exception:
            return 0

    def _sync_table(self, index: str, kind: str, rows: list[dict], stale: list[str], schema) -> None:
        name = f"{index}__{kind}"
        data = pa.Table.from_pylist(rows, schema=schema)
        if not self.has_table(name):
            self.db.create_table(name, data=data, schema=schema)
            return
        t = self.db.open_table(name)
        if stale:
            ids = ", ".join("'" + s.replace("'", "''") + "'" for s in stale)
            t.delete(f"doc_id IN ({ids})")
        if rows:
            t.add(data)

    def _write_json_table(self, index: str, kind: str, rows: list[dict]) -> None:
        name = f"{index}__{kind}"
        data = pa.table({"qid": [r["qid"] for r in rows], "json": [r["json"] for r in rows]},
                        schema=pa.schema([("qid", pa.string()), ("json", pa.string())]))
        if self.has_table(name):
            old = self.db.open_table(name).to_arrow()
            if old.num_rows == data.num_rows and old.column("json").to_pylist() == data.column("json").to_pylist():
                return  # unchanged: keep the table version as it is
            self.db.create_table(name, data=data, mode="overwrite")
        else:
            self.db.create_table(name, data=data)

    def _build_fts(self, index: str) -> None:
        if not self.has_table(f"{index}__chunks"):
            return
        # bm25_text is already analysed (casefolded, accent-stripped, stemmed per language),
        # so LanceDB only needs to split on whitespace.
        from lancedb.index import FTS

        self.table(index, "chunks").create_index(
            "bm25_text", replace=True,
            config=FTS(base_tokenizer="whitespace", lower_case=False, stem=False, remove_stop_words=False,
                       ascii_folding=False, max_token_length=None))


def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="chunk", file=sys.stderr, leave=False, dynamic_ncols=True)
