"""The LanceDB workspace: documents, pages, parents and chunks tables per index.

An *index* is one dataset under one ``IndexConfig`` (chunking + embedder); its tables
are named ``<dataset>__<hash8>__<kind>`` so indexes with different configs live side
by side. Ingest is a sync: an unchanged document (same content hash) is left alone,
a changed one has its rows replaced, a vanished one is removed. Chunks carry a
``bm25_text`` column (language-aware analysed tokens) with a LanceDB full-text index.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from rag.ingest.chunking import ChunkConfig, chunk_document
from rag.ingest.corpora import BUNDLED, slug
from .embedders import EmbedderConfig, EmbeddingCache, get_embedder
from .engines import get_engine
from .rows import SCHEMAS, chunk_row, chunk_schema, document_row, page_rows, parent_row  # noqa: F401
from rag.errors import env_number
from rag.files import write_whole
from rag.models import Dataset, Question
from rag.llm.urls import redact_url

DEFAULT_WORKSPACE = Path("results")

@dataclass(frozen=True)
class IndexConfig:
    chunking: ChunkConfig = field(default_factory=ChunkConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["embedder"]["base_url"] = redact_url(d["embedder"]["base_url"])  # stored and printed: no credentials
        return d

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
    blank_pages: int = 0  # pages with no text (kept for their page number; no chunks)
    parse_seconds: float = 0.0
    file_parse_seconds: dict = field(default_factory=dict)
    file_embed_seconds: dict = field(default_factory=dict)
    notices: list = field(default_factory=list)  # repairs made (one line each)
    vector_index: str = "exact"  # exact (in-memory flat search) | IVF_HNSW_SQ (LanceDB ANN index)
    vector_index_seconds: float = 0.0
    skipped: list = field(default_factory=list)
    # chunks longer than the embedder reads (their tails are never embedded), the longest named: over the chunks
    # this ingest embedded (local engine; a cached vector was checked when it was embedded), over every chunk of
    # the changed documents with the Ray engine (counted in its parallel chunk tasks)
    over_window: int = 0
    window: int = 0
    over_window_worst: list = field(default_factory=list)  # (chunk_id, tokens), longest first

    def note_over_window(self, emb, texts: list[str], chunk_ids: list[str]) -> None:
        counts = emb.count_tokens(texts) if emb.max_tokens and texts else None
        if counts:
            self.note_over_window_counts(emb, len(texts), [(c, n) for c, n in zip(chunk_ids, counts)
                                                           if n > emb.max_tokens])

    def note_over_window_counts(self, emb, n_chunks: int, over: list[tuple[str, int]]) -> None:
        """``over``: (chunk_id, tokens) of the chunks longer than the embedder reads; one notice names them."""
        if not emb.max_tokens:
            return
        self.window, self.over_window = emb.max_tokens, len(over)
        self.over_window_worst = sorted(over, key=lambda x: (-x[1], x[0]))[:3]
        if over:
            worst = "; ".join(f"{c} ({n:,} tokens)" for c, n in self.over_window_worst)
            self.notices.append(
                f"{len(over)} of {n_chunks} chunks are longer than the {emb.max_tokens} tokens {emb.name} reads: "
                f"their tails are not embedded (longest: {worst}); smaller --chunk-tokens or --leaf-max fit them")

    def render(self) -> str:
        lines = [
            f"ingested {self.dataset} into index {self.index}",
            f"  documents {self.documents} (added {self.added}, replaced {self.replaced}, unchanged {self.unchanged}, "
            f"removed {self.removed})",
            f"  pages {self.pages} ({self.blank_pages} blank)  chunks {self.chunks}  tokens {self.tokens}  "
            f"questions {self.questions}",
            f"  vector index: {self.vector_index}"
            + (f" (built in {self.vector_index_seconds:.1f}s)" if self.vector_index_seconds else
               (f" (ANN above {ANN_MIN_CHUNKS:,} chunks)" if self.vector_index == "exact" else "")),
            f"  parsed {len(self.file_parse_seconds)} file(s) in {self.parse_seconds:.1f}s; embedded {self.embedded} "
            f"chunks ({self.cache_hits} from cache) in {self.embed_seconds:.1f}s; total {self.seconds:.1f}s",
        ]
        slow = sorted(set(self.file_parse_seconds) | set(self.file_embed_seconds),
                      key=lambda f: -(self.file_parse_seconds.get(f, 0) + self.file_embed_seconds.get(f, 0)))
        if self.file_parse_seconds and slow:
            lines.append("  slowest files: " + "; ".join(
                f"{_short_path(f)} parse {self.file_parse_seconds.get(f, 0):.2f}s embed "
                f"{self.file_embed_seconds.get(f, 0):.2f}s" for f in slow[:5]))
        lines += [f"  notice: {n}" for n in self.notices]
        # what was left out, and apart from it what was kept with a warning (a file ingested with a downgrade is
        # not a skipped file)
        left = [s for s in self.skipped if getattr(s, "kind", "skipped") != "warning"]
        warned = [s for s in self.skipped if getattr(s, "kind", "skipped") == "warning"]
        lines.append(f"  skipped {len(left)}" + (":" if left else ""))
        lines += [f"    - {s}" for s in left]
        if warned:
            lines.append(f"  kept with a warning {len(warned)}:")
            lines += [f"    - {s}" for s in warned]
        return "\n".join(lines)


class ReadTable:
    """A LanceDB table opened for reading through its Lance dataset (LanceDB keeps a local table as the dataset
    ``lancedb/NAME.lance``): what reading an index needs (to_arrow, version, schema, count_rows, to_lance) at the
    version it was opened at, without importing lancedb; anything else (search) goes to LanceDB's table."""

    def __init__(self, ws: "Workspace", name: str):
        import lance

        self._ws, self.name = ws, name
        self._ds = lance.dataset(str(ws.dataset_path(name)))

    @property
    def version(self) -> int:
        return self._ds.version

    @property
    def schema(self):
        return self._ds.schema

    def to_arrow(self):
        return self._ds.to_table()

    def count_rows(self, filter=None) -> int:
        return self._ds.count_rows(filter)

    def to_lance(self):
        return self._ds

    def __getattr__(self, name):
        return getattr(self._ws.db.open_table(self.name), name)


class Workspace:
    """A folder holding ``lancedb/`` (the indexes) and caches."""

    def __init__(self, root: str | Path = DEFAULT_WORKSPACE):
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(f"{self.root}: a file stands where the workspace folder should be; "
                                     "pass another --workspace") from None
        except OSError as e:
            raise PermissionError(f"{self.root}: cannot create the workspace folder ({e.strerror})") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise PermissionError(f"{self.root}: the workspace folder is not writable; pass another --workspace "
                                  "or fix its permissions")
        self._db = None
        self._emb_cache: EmbeddingCache | None = None

    @property
    def db(self):
        """The LanceDB connection, made on first use: `import lancedb` costs ~3 s (its REST namespace client
        alone ~2 s) where reading an index through pylance needs ~0.7 s (``read_table``)."""
        if self._db is None:
            import lancedb

            self._db = lancedb.connect(str(self.root / "lancedb"))
        return self._db

    @property
    def embedding_cache(self) -> EmbeddingCache:
        if self._emb_cache is None:
            self._emb_cache = EmbeddingCache(self.root / "cache" / "embeddings.sqlite")
        return self._emb_cache

    def index_name(self, dataset: str, cfg: IndexConfig) -> str:
        return f"{slug(dataset)}__{cfg.hash}"

    def table_names(self) -> list[str]:
        if self._db is None:  # LanceDB lists a local folder's `NAME.lance` datasets: the same, without importing it
            folder = self.root / "lancedb"
            return sorted(p.name[:-6] for p in folder.iterdir() if p.name.endswith(".lance")) if folder.is_dir() else []
        res = self.db.list_tables()
        return list(getattr(res, "tables", res))

    def has_table(self, name: str) -> bool:
        return name in self.table_names()

    def table(self, index: str, kind: str):
        return self.db.open_table(f"{index}__{kind}")

    def read_table(self, index: str, kind: str) -> "ReadTable":
        """A table to read (open_index, meta): straight through pylance unless LanceDB is already loaded."""
        return ReadTable(self, f"{index}__{kind}")

    def indexes(self) -> list[dict]:
        out = []
        for t in sorted(self.table_names()):
            if t.endswith("__meta"):
                rows = ReadTable(self, t).to_arrow().to_pylist()
                if rows:
                    out.append(json.loads(rows[0]["json"]))
        return out

    def meta(self, index: str) -> dict:
        rows = self.read_table(index, "meta").to_arrow().to_pylist()
        return json.loads(rows[0]["json"])

    # ------------------------------------------------------------------ remembered question files
    def _registry_path(self) -> Path:
        return self.root / "datasets.json"

    def remember_questions(self, folder: str | Path, questions: str | Path) -> None:
        """A folder dataset remembers its questions file, so a later run without --questions
        scores the same questions instead of none."""
        reg = self._read_json(self._registry_path())
        reg[str(Path(folder).resolve())] = str(Path(questions).resolve())
        self._write_json(self._registry_path(), reg)

    def remembered_questions(self, folder: str | Path) -> str | None:
        return self._read_json(self._registry_path()).get(str(Path(folder).resolve()))

    def _filters_path(self) -> Path:
        return self.root / "folder_filters.json"

    def remember_filters(self, folder: str | Path, include: tuple = (), exclude: tuple = (),
                         gitignore: bool = True) -> None:
        """A folder ingested with --include/--exclude/--no-gitignore keeps them: a later run or search of the
        folder reads the same files (else it would ingest what the user left out)."""
        reg = self._read_json(self._filters_path())
        key = str(Path(folder).resolve())
        if include or exclude or not gitignore:
            reg[key] = {"include": list(include), "exclude": list(exclude), "gitignore": gitignore}
        else:
            reg.pop(key, None)
        self._write_json(self._filters_path(), reg)

    def remembered_filters(self, folder: str | Path) -> dict:
        return self._read_json(self._filters_path()).get(str(Path(folder).resolve()), {})

    # ------------------------------------------------------------------ dataset identity
    def _names_path(self) -> Path:
        return self.root / "dataset_names.json"

    def dataset_name(self, folder: str | Path, wait: float | None = None) -> str:
        """The dataset name of a folder in this workspace: its base name, unless another folder (or a
        bundled set) already has that name, then ``<base>-<hash of its path>``. Kept in
        dataset_names.json, so two folders named ``docs`` never share (and never delete) one index."""
        key = str(Path(folder).resolve())
        names = self._read_json(self._names_path())
        if key in names:
            return names[key]
        with self.writer_lock(wait):
            names = self._read_json(self._names_path())
            if key in names:
                return names[key]
            base = Path(key).name or "folder"
            taken = set(names.values()) | set(BUNDLED)
            name = base
            if name in taken:
                name = f"{base}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
            names[key] = name
            self._write_json(self._names_path(), names)
        return name

    def load(self, spec: str, questions: str | None = None, cfg: "IndexConfig | None" = None, **kw) -> Dataset:
        """``load_any`` with this workspace's dataset names (folders) and the last good version of any
        document whose file cannot be read now (kept, said aloud; rag/ingest/corpora.py ``_keep_last_good``)."""
        from rag.ingest.corpora import load_any

        wait = kw.pop("wait", None)
        if spec in BUNDLED or not Path(spec).is_dir():
            return load_any(spec, questions, parse_cache=self.parse_cache, **kw)
        name = self.dataset_name(spec, wait)
        index = self.index_name(name, cfg or IndexConfig())
        # the folder's remembered --include/--exclude/--no-gitignore apply unless given now (then remembered)
        given = {k: v for k, v in ((k, kw.pop(k, None)) for k in ("include", "exclude", "gitignore"))
                 if v is not None}
        if given:  # what is given replaces what was remembered
            self.remember_filters(spec, **given)
        filters = self.remembered_filters(spec)
        started = time.time_ns()
        # the workspace inside the corpus folder (`ragwb ingest .`) is never read back as documents
        ds = load_any(spec, questions, parse_cache=self.parse_cache, name=name,
                      previous=lambda doc_id: self.stored_document(index, doc_id), never=(self.root,),
                      **filters, **kw)
        ds.source_folder, ds.read_started_ns, ds.folder_filters = str(Path(spec).resolve()), started, filters
        # listing the folder (its ignore rules and patterns) and parsing: what an ingest's total must include
        ds.load_seconds = (time.time_ns() - started) / 1e9
        return ds

    def chunks_to_embed(self, ds: Dataset, cfg: "IndexConfig") -> int:
        return len(self.texts_to_embed(ds, cfg))

    def texts_to_embed(self, ds: Dataset, cfg: "IndexConfig") -> list[str]:
        """The embedding-cache keys (embedder and text digest) of the chunks ``chunks_to_embed`` counts: an index
        sweep counts a text two configs share once."""
        """How many chunks an ingest of ``ds`` would embed now (changed documents whose chunks are neither
        in the embedding cache nor in the set's shipped vectors): the cost a notebook states before it
        starts a long ingest. Nothing is written."""
        from .shipped import manifest

        if (ds.name in BUNDLED and manifest().get(ds.name, {}).get("embedder_key") == cfg.embedder.key
                and cfg.chunking == ChunkConfig()):
            return []  # seeded from the shipped vectors (another chunking is counted below: index axes sweep it)
        existing, dirty = (self._verified_documents(self.index_name(ds.name, cfg))
                           if self.has_table(f"{self.index_name(ds.name, cfg)}__documents") else ({}, set()))
        texts = [c.embed_text for d in ds.documents
                 if existing.get(d.doc_id) != d.index_hash or d.doc_id in dirty
                 for c in chunk_document(d, cfg.chunking)[0]]
        cache = self.embedding_cache
        keys = list(dict.fromkeys(cache._key(cfg.embedder.key, "passage", t) for t in texts))
        found: set = set()
        with cache._lock:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                found.update(k for (k,) in cache.db.execute(
                    f"SELECT k FROM emb WHERE k IN ({','.join('?' * len(part))})", part).fetchall())
        return [k for k in keys if k not in found]

    def stored_document(self, index: str, doc_id: str):
        """A document as its committed rows hold it (text and pages), or None."""
        from rag.models import Document, Page

        if not self.has_table(f"{index}__documents"):
            return None
        try:
            lit = "'" + doc_id.replace("'", "''") + "'"
            rows = self.table(index, "documents").search().where(f"doc_id = {lit}").limit(2).to_list()
            if len(rows) != 1:
                return None
            r = rows[0]
            pages = sorted(self.table(index, "pages").search().where(f"doc_id = {lit}")
                           .limit(max(1, int(r["n_pages"]))).to_list(), key=lambda p: p["page_no"])
            if len(pages) != r["n_pages"]:
                return None
        except Exception:
            return None
        from rag.ingest.code import code_language

        return Document(doc_id, r["title"], r["language"], r["source_path"], r["text"],
                        [Page(p["page_id"], doc_id, p["page_no"], p["start"], p["end"], p["text"]) for p in pages],
                        r["source_path"].lower().endswith((".md", ".markdown", ".docx", ".html", ".htm")),
                        code_language(r["source_path"]))

    @staticmethod
    def _read_json(path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    @staticmethod
    def _write_json(path: Path, d: dict) -> None:
        write_whole(path, json.dumps(d, indent=1, sort_keys=True).encode())  # a reader never sees half a file

    def questions(self, index: str) -> list[Question]:
        rows = self.table(index, "questions").to_arrow().to_pylist()
        return [Question.from_dict(json.loads(r["json"])) for r in rows]

    # ------------------------------------------------------------------ ingest
    @property
    def parse_cache(self):
        from rag.ingest.corpora import ParseCache

        return ParseCache(self.root / "cache" / "parsed")

    def writer_lock(self, wait: float | None = None):
        """Serialise writers of this workspace (``ragwb ingest`` and the ingest step of ``ragwb run``)."""
        return WorkspaceLock(self.root, lock_wait_default() if wait is None else wait)

    def ingest(self, ds: Dataset, cfg: IndexConfig = IndexConfig(), progress: bool = True,
               wait: float | None = None, vector_index: str = "auto", engine=None,
               on_progress=None) -> IngestSummary:
        """Sync the index of ``ds`` under ``cfg``: crash-safe (a document counts as ingested only once
        all its rows are committed, its ``documents`` row last) and self-repairing (every ingest
        verifies each document's rows and redoes incomplete, duplicated or orphaned ones).
        ``engine`` (rag/index/engines.py, default local): where chunking and embedding run.
        ``on_progress(n_done, n_total)``: called as chunks are embedded (a notebook's progress bar)."""
        if vector_index not in VECTOR_INDEX_MODES:
            raise ValueError(f"vector index must be one of {', '.join(VECTOR_INDEX_MODES)}, not {vector_index!r}")
        with self.writer_lock(wait):
            return self._ingest(ds, cfg, progress, vector_index, engine, on_progress)

    def _ingest(self, ds: Dataset, cfg: IndexConfig, progress: bool, vector_index: str = "auto",
                engine=None, on_progress=None) -> IngestSummary:
        t0 = time.perf_counter()
        index = self.index_name(ds.name, cfg)
        # the Skipped entries themselves: the summary tells what was left out from what was kept with a warning
        summ = IngestSummary(ds.name, index, skipped=list(ds.skipped))
        summ.notices += self._repair_tables(index)
        existing, dirty = self._verified_documents(index)
        if dirty:
            summ.notices.append(f"repairing {len(dirty)} document(s) left incomplete or duplicated by an "
                                f"interrupted or concurrent ingest: {', '.join(sorted(dirty)[:5])}"
                                f"{' ...' if len(dirty) > 5 else ''}")
        current = {d.doc_id: d for d in ds.documents}
        changed = [d for d in ds.documents if existing.get(d.doc_id) != d.index_hash]
        removed = [i for i in existing if i not in current]
        summ.added = sum(1 for d in changed if d.doc_id not in existing)
        summ.replaced = len(changed) - summ.added
        summ.unchanged = len(ds.documents) - len(changed)
        summ.removed = len(removed)

        stale = sorted({d.doc_id for d in changed} | set(removed) | dirty)
        engine = engine or get_engine("local")
        shipped, has_shipped = None, False
        if changed and ds.name in BUNDLED:  # a bundled set: seed the cache with its shipped vectors
            from .shipped import manifest, seed_cache

            has_shipped = ds.name in manifest()
            shipped = seed_cache(self.embedding_cache, ds.name, cfg.embedder.key)
            if shipped:
                summ.notices.append(shipped)
        if engine.name == "local" or not changed:  # nothing to chunk or embed: the stale rows go here
            dim = self._ingest_here(index, changed, stale, cfg, summ, progress, ds.name, on_progress)
        else:
            dim = engine.ingest_chunks(self, index, changed, stale, cfg, summ, progress)
            summ.notices.append(f"engine {engine.name}: {engine.describe()}")
        if has_shipped and summ.embedded and shipped is None:
            summ.notices.append(f"{summ.embedded} chunks were not in the shipped vectors (chunking differs from "
                                "the shipped default): embedded them")
        summ.file_parse_seconds = dict(ds.parse_seconds)
        summ.parse_seconds = sum(ds.parse_seconds.values())
        if changed or removed or dirty or not self.has_table(f"{index}__meta"):
            self._build_fts(index)
        summ.vector_index, summ.vector_index_seconds = self._vector_index(
            index, vector_index, bool(changed or removed or dirty))
        if ds.questions or not self.has_table(f"{index}__questions"):
            # an ingest without a questions file never wipes the questions stored before
            self._write_json_table(index, "questions", [{"qid": q.qid,
                                                         "json": json.dumps(q.to_dict(), ensure_ascii=False)}
                                                        for q in ds.questions])
        # totals for the whole index (not just what changed)
        docs_t = self.table(index, "documents").to_arrow().select(["n_pages", "n_tokens"])
        summ.documents = docs_t.num_rows
        summ.pages = int(pa.compute.sum(docs_t["n_pages"]).as_py() or 0)
        summ.tokens = int(pa.compute.sum(docs_t["n_tokens"]).as_py() or 0)
        summ.chunks = self.table(index, "chunks").count_rows()
        summ.blank_pages = self.table(index, "pages").count_rows("length(text) = 0")
        summ.questions = len(ds.questions)
        meta = {"index": index, "dataset": ds.name, "config": cfg.to_dict(), "config_hash": cfg.hash,
                "dim": dim, "documents": summ.documents, "vector_index": summ.vector_index,
                "pages": summ.pages, "chunks": summ.chunks, "tokens": summ.tokens, "questions": summ.questions,
                "skipped": [str(x) for x in summ.skipped]}
        self._write_json_table(index, "meta", [{"qid": "meta", "json": json.dumps(meta)}])
        if ds.source_folder or ds.name in BUNDLED:  # what a later `ragwb search` checks instead of reading again
            from .freshness import write_snapshot

            if ds.source_folder:
                write_snapshot(self.root, index, ds.source_folder, ds.read_started_ns,
                               [d.source_path for d in ds.documents], ds.folder_filters)
            else:  # a bundled set changes only with the package (the chunker's version is recorded)
                write_snapshot(self.root, index, ds.name, time.time_ns(), [], {})
        if (changed or removed or dirty) and summ.vector_index == "exact":
            # BM25's postings built now and cached (cache/bm25): a fresh process's first `ragwb search` reads
            # them (~20 ms) instead of building them (~0.2 s a 10,000 chunks); the tokens in the reader's order
            from .bm25 import cached_bm25

            texts = self.read_table(index, "chunks").to_lance().to_table(columns=["bm25_text"]).column("bm25_text")
            cached_bm25(self.bm25_cache, index, texts.to_pylist())
        if changed or removed or dirty:
            self.keep_block_counts(index, cfg)
        # the total includes reading the folder (listing, ignore rules, parsing), not only the parse
        summ.seconds = time.perf_counter() - t0 + max(summ.parse_seconds, getattr(ds, "load_seconds", 0.0))
        return summ

    @property
    def bm25_cache(self) -> Path:
        """BM25's postings, one file per index keyed by its tokens' digest (rag/index/bm25.py)."""
        return self.root / "cache" / "bm25"

    def block_counts_path(self, index: str, encoding: str) -> Path:
        return self.root / "cache" / "tokens" / f"{index}-{encoding}.npz"

    def keep_block_counts(self, index: str, cfg: IndexConfig) -> None:
        """The exact tokens of every code chunk's default block (the strategies' shipped ``code_block_chars`` and
        ``code_cut``), counted now and kept in cache/tokens: a fresh process's first `ragwb search` then counts
        nothing and never loads the BPE (~0.35 s; issue 46, 5). A prose index has no code blocks: nothing kept."""
        from rag.ingest.code.blocks import DEFAULT_BLOCK_CHARS, DEFAULT_CUT, code_block_text, follow_line
        from rag.tokens import load_counts, save_counts

        ds = self.read_table(index, "chunks").to_lance()
        cols = ["text", "doc_id", "line_start", "line_end", "code_language", "symbol", "kind", "page_id",
                "chunk_index", "start"]
        if not set(cols) <= set(ds.schema.names):
            return
        # only code rows are read (a prose index of a million chunks reads one short column, finds none)
        rows = ds.to_table(columns=cols, filter="code_language IS NOT NULL AND code_language != ''").to_pylist()
        at = {(r["page_id"], r["chunk_index"]): r for r in rows}

        def follow(r):  # the same block a strategy packs: a doc-only chunk shows its code's first line
            def after():
                k = r["chunk_index"] + 1
                while (n := at.get((r["page_id"], k))) is not None:
                    yield n["text"], n["start"] - r["start"], n["line_start"], n["symbol"]
                    k += 1
            return follow_line(r["text"], r["symbol"], r["code_language"], r["line_start"], after())
        texts = [code_block_text(r["text"], (r["line_start"], r["line_end"]), r["code_language"], r["doc_id"],
                                 r["symbol"], r["kind"], DEFAULT_BLOCK_CHARS, DEFAULT_CUT, follow(r))[0] for r in rows]
        path = self.block_counts_path(index, cfg.chunking.encoding)
        load_counts(path, cfg.chunking.encoding)  # the unchanged files' blocks are not counted again
        try:
            if texts:
                save_counts(path, texts, cfg.chunking.encoding)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only workspace still searches (counting as it goes)

    def _ingest_here(self, index: str, changed: list, stale: list[str], cfg: IndexConfig, summ: IngestSummary,
                     progress: bool, name: str, on_progress=None) -> int:
        """Chunk, embed and write the changed documents in this process (the local engine). The
        documents row of each document is written last: it is the commit marker."""
        doc_rows, pages, parent_rows, chunk_rows, chunk_file, texts, chunk_ids = [], [], [], [], [], [], []
        for d in changed:
            chunks, parents = chunk_document(d, cfg.chunking)
            doc_rows.append(document_row(d, cfg, len(parents), len(chunks)))
            pages += page_rows(d, cfg)
            parent_rows.extend(parent_row(p) for p in parents)
            for c in chunks:
                chunk_rows.append(chunk_row(c, d.language))
                texts.append(c.embed_text)
                chunk_file.append(d.source_path)
                chunk_ids.append(c.chunk_id)
        emb = get_embedder(cfg.embedder)
        te = time.perf_counter()
        m0 = self.embedding_cache.misses
        bar = _progress(len(texts), f"embedding {name}", progress)

        def tick(n):
            if bar:
                bar.update(n)
            if on_progress is not None:
                on_progress(n, len(texts))
            _crash_point("embedding")

        fresh: list[int] = []
        vecs = self.embedding_cache.embed(emb, cfg.embedder.key, texts, "passage", progress=tick, embedded=fresh)
        if bar:
            bar.close()
        # said, never silently cut: the texts embedded now (a cached vector was checked when it was embedded;
        # counting every cached chunk again cost the main job ~3 s of e5 tokenizing)
        summ.note_over_window(emb, [texts[i] for i in fresh], [chunk_ids[i] for i in fresh])
        summ.embed_seconds = time.perf_counter() - te
        summ.embedded = self.embedding_cache.misses - m0  # distinct texts actually embedded
        summ.cache_hits = len(texts) - summ.embedded
        for r, v in zip(chunk_rows, vecs):
            r["vector"] = v
        if texts:  # embedding time shared out by each file's chunks (for the per-file figures)
            for f, n in collections.Counter(chunk_file).items():
                summ.file_embed_seconds[f] = summ.embed_seconds * n / len(texts)
        dim = int(vecs.shape[1]) if len(vecs) else self._dim(index) or emb.dim
        # documents first out, last in: the documents row is the commit marker of a document
        order = (("documents", [], SCHEMAS["documents"]), ("pages", pages, SCHEMAS["pages"]),
                 ("parents", parent_rows, SCHEMAS["parents"]), ("chunks", chunk_rows, chunk_schema(dim)),
                 ("documents", doc_rows, SCHEMAS["documents"]))
        for step, (kind, rows, schema) in enumerate(order):
            self._sync_table(index, kind, rows, stale if step == 0 or kind != "documents" else [], schema)
            _crash_point({1: "tables_created", 2: "before_chunks"}.get(step, ""))
        return dim

    def dataset_path(self, name: str) -> Path:
        """Where LanceDB keeps the local table ``name``: the Lance dataset ``lancedb/NAME.lance``."""
        return self.root / "lancedb" / f"{name}.lance"

    def table_uri(self, index: str, kind: str) -> str:
        """Where a table's Lance dataset lives (engines write it directly, e.g. through lance-ray)."""
        return str(self.dataset_path(f"{index}__{kind}").resolve())

    KINDS = ("documents", "pages", "parents", "chunks", "questions", "meta", "page_vectors")

    def _repair_tables(self, index: str) -> list[str]:
        """Drop tables a killed process left half-created (listed but unreadable), and tables of an
        older schema; the sync below then rebuilds them. Returns one notice per repair."""
        notices = []
        names = set(self.table_names())
        for kind in self.KINDS:
            name = f"{index}__{kind}"
            if name not in names:
                continue
            try:
                t = self.db.open_table(name)
                t.count_rows()
                if kind == "documents" and "n_chunks" not in t.schema.names:
                    raise ValueError("written by an older version")
                if kind == "chunks" and "symbol" not in t.schema.names:
                    # before code chunks: its documents verify as incomplete and are chunked again
                    # (their vectors come from the embedding cache)
                    self._drop(name)
                    notices.append(f"rebuilt table {name}: written by an older version (no code columns)")
                    continue
                missing = missing_data_files(t)
                if missing:
                    # a data file gone from disk: no row of this index can be trusted; rebuild all of it
                    self._drop(name)
                    for other in self.KINDS:
                        if other != kind and f"{index}__{other}" in names:
                            self._drop(f"{index}__{other}")
                    gone = [m for m in missing if not m.endswith(" (damaged)")]
                    what = "; ".join(x for x in (f"is missing {len(gone)} data file(s)" if gone else "",
                                                 f"has {len(missing) - len(gone)} damaged data file(s)"
                                                 if len(missing) > len(gone) else "") if x)
                    notices.append(f"rebuilt index {index}: table {kind} {what} ({', '.join(missing[:3])}); every "
                                   "document is ingested again")
                    return notices
            except Exception as e:
                self._drop(name)
                notices.append(f"rebuilt table {name}: it was damaged ({type(e).__name__}: {str(e)[:80]})")
                if kind == "documents":  # without documents nothing else can be verified: start clean
                    for other in self.KINDS:
                        if other != "documents" and f"{index}__{other}" in names:
                            self._drop(f"{index}__{other}")
        return notices

    def _drop(self, name: str) -> None:
        import shutil

        try:
            self.db.drop_table(name)
        except Exception:
            pass
        shutil.rmtree(self.root / "lancedb" / f"{name}.lance", ignore_errors=True)

    def _verified_documents(self, index: str) -> tuple[dict[str, str], set[str]]:
        """(doc_id -> content hash of every complete document, doc ids whose rows need redoing).
        Complete = exactly one documents row, and exactly n_pages / n_parents / n_chunks rows with
        no duplicated ids in the other tables."""
        if not self.has_table(f"{index}__documents"):
            orphans = set()
            for kind in ("pages", "parents", "chunks"):
                if self.has_table(f"{index}__{kind}"):
                    orphans |= set(self.table(index, kind).to_arrow().column("doc_id").to_pylist())
            return {}, orphans
        docs = self.table(index, "documents").to_arrow().select(
            ["doc_id", "content_hash", "n_pages", "n_parents", "n_chunks"]).to_pylist()
        seen = collections.Counter(r["doc_id"] for r in docs)
        counts, dup = {}, set()
        for kind, id_col in (("pages", "page_id"), ("parents", "parent_id"), ("chunks", "chunk_id")):
            if not self.has_table(f"{index}__{kind}"):
                counts[kind] = collections.Counter()
                continue
            t = self.table(index, kind).to_arrow().select(["doc_id", id_col])
            counts[kind] = collections.Counter(t.column("doc_id").to_pylist())
            ids = collections.Counter(zip(t.column("doc_id").to_pylist(), t.column(id_col).to_pylist()))
            dup |= {d for (d, _), n in ids.items() if n > 1}
        ok, dirty = {}, set()
        for r in docs:
            d = r["doc_id"]
            if (seen[d] == 1 and d not in dup and counts["pages"][d] == r["n_pages"]
                    and counts["parents"][d] == r["n_parents"] and counts["chunks"][d] == r["n_chunks"]):
                ok[d] = r["content_hash"]
            else:
                dirty.add(d)
        for kind in ("pages", "parents", "chunks"):
            dirty |= set(counts[kind]) - set(seen)  # orphans: rows of a document never committed
        return ok, dirty

    def _dim(self, index: str) -> int:
        try:
            return int(self.meta(index)["dim"])
        except Exception:
            return 0

    def _sync_table(self, index: str, kind: str, rows: list[dict], stale: list[str], schema) -> None:
        name = f"{index}__{kind}"
        data = pa.Table.from_pylist(rows, schema=schema)
        if not self.has_table(name):
            # overwrite: a folder a killed create left behind must not block the new table
            self.db.create_table(name, data=data, schema=schema, mode="overwrite")
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

    def _vector_index(self, index: str, mode: str, changed: bool) -> tuple[str, float]:
        """``auto``: an ANN index (IVF_HNSW_SQ, cosine) from ANN_MIN_CHUNKS chunks up, exact search below;
        ``ann`` / ``exact`` force it. Rebuilt when the chunks changed."""
        t = self.table(index, "chunks")
        n = t.count_rows()
        want = mode == "ann" or (mode == "auto" and n >= ANN_MIN_CHUNKS)
        have = [i for i in t.list_indices() if list(i.columns) == ["vector"]]
        if not want:
            for i in have:  # exact asked for: an old ANN index must not answer queries
                t.drop_index(i.name)
            # the page vectors are left in place (the exact reader never reads them): a run still
            # reading them through an ANN reader keeps its snapshot, and an ANN rebuild overwrites them
            return "exact", 0.0
        if have and not changed:
            if not self.has_table(f"{index}__page_vectors"):  # e.g. a process killed between the two steps
                self._write_page_vectors(index)
            return "IVF_HNSW_SQ", 0.0
        from lancedb.index import BTree, IvfHnswSq

        t0 = time.perf_counter()
        t.create_index("vector", config=IvfHnswSq(distance_type="cosine",
                                                  num_partitions=max(1, n // ANN_ROWS_PER_PARTITION)), replace=True)
        t.create_index("page_id", config=BTree(), replace=True)  # fallback page-vector reads filter by page id
        self._write_page_vectors(index)
        return "IVF_HNSW_SQ", time.perf_counter() - t0

    def _write_page_vectors(self, index: str) -> None:
        """An ANN index's page vectors, one row per page (``mean_page_vector`` of its chunks in
        chunk_index order: what the exact reader computes in memory), so two_phase_pages reads its
        candidate pages' vectors with one take by row id instead of a filtered scan of their chunks
        (20 ms -> ~3 ms per question at 1M chunks). Built PAGE_VECTOR_BATCH chunk vectors at a time:
        never every vector in memory."""
        import pandas as pd

        ds = self.table(index, "chunks").to_lance()
        keys = ds.to_table(columns=["page_id", "chunk_index"])
        codes, pids = pd.factorize(keys.column("page_id").to_numpy(zero_copy_only=False))
        ci = keys.column("chunk_index").to_numpy()
        order = np.lexsort((np.arange(len(ci)), ci, codes))  # by page, then chunk_index, then row
        starts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]]) if len(order) else order
        ends = np.r_[starts[1:], len(order)]
        dim = ds.schema.field("vector").type.list_size
        schema = pa.schema([("page_id", pa.string()), ("vector", pa.list_(pa.float32(), dim))])
        batches, g = [], 0  # runs of whole pages of at most PAGE_VECTOR_BATCH chunks (a bigger page alone)
        while g < len(starts):
            h = g + 1
            while h < len(starts) and ends[h] - starts[g] <= PAGE_VECTOR_BATCH:
                h += 1
            batches.append((g, h))
            g = h
        for b, (g, h) in enumerate(batches or [(0, 0)]):  # an empty index still gets its (empty) table
            rows = order[starts[g]:ends[h - 1]] if h > g else order[:0]
            m = vectors_of(ds.take(rows, columns=["vector"]).column("vector")) if len(rows) else np.zeros((0, dim))
            out = [mean_page_vector(m[starts[j] - starts[g]:ends[j] - starts[g]]) for j in range(g, h)]
            data = pa.table({"page_id": [pids[codes[order[starts[j]]]] for j in range(g, h)],
                             "vector": pa.FixedSizeListArray.from_arrays(
                                 pa.array(np.concatenate(out) if out else np.zeros(0, np.float32)), dim)},
                            schema=schema)
            if b == 0:
                self.db.create_table(f"{index}__page_vectors", data=data, schema=schema, mode="overwrite")
            else:
                self.db.open_table(f"{index}__page_vectors").add(data)

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


def _short_path(f: str) -> str:
    """A file as a reader tells it apart: relative to the working folder where it lies below it, else its last three
    parts (three files called schemas.ts are three different paths, not one base name)."""
    p = Path(f)
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(Path(*p.parts[-3:])) if len(p.parts) > 3 else str(p)


def lock_wait_default() -> float:
    """Seconds a writer waits for the workspace lock: RAGWB_LOCK_WAIT, else 600."""
    return env_number("RAGWB_LOCK_WAIT", 600.0)


VECTOR_INDEX_MODES = ("auto", "ann", "exact")
ANN_MIN_CHUNKS = int(env_number("RAGWB_ANN_MIN_CHUNKS", 100000, integer=True))  # auto: ANN index from here up
ANN_ROWS_PER_PARTITION = 4096
PAGE_VECTOR_BATCH = 65_536  # chunk vectors read at a time while an ANN index's page vectors are built


def missing_data_files(table) -> list[str]:
    """Data files the table's current version names that are not on disk (a deleted or lost file makes
    every later read fail; counting rows reads only the manifest, so it does not notice)."""
    try:
        ds = table.to_lance()
        root = Path(ds.uri)
    except Exception:
        return []
    missing = []
    for frag in ds.get_fragments():
        for f in frag.data_files():
            path = f.path if not callable(getattr(type(f), "path", None)) else f.path()
            if not path:
                continue
            full = root / "data" / path if (root / "data" / path).exists() else Path(path)
            if not full.exists() or not _lance_footer_ok(full):
                missing.append(str(path) + ("" if not full.exists() else " (damaged)"))
    return missing


def _lance_footer_ok(path: Path) -> bool:
    """Whether a Lance data file ends with its format's magic (a truncated or overwritten file does not):
    a cheap check that catches what reading rows would only find half-way through a run."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() < 16:
                return False
            fh.seek(-4, 2)
            return fh.read(4) == b"LANC"
    except OSError:
        return False


def vectors_of(column) -> np.ndarray:
    """A fixed-size-list vector column (Arrow) as a float32 matrix, one row per vector."""
    vec = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    return vec.values.to_numpy(zero_copy_only=False).reshape(-1, vec.type.list_size).astype(np.float32, copy=False)


def mean_page_vector(rows: np.ndarray) -> np.ndarray:
    """A page's embedding: the normalised mean of its chunks' vectors (float32, chunk_index order)."""
    v = rows.mean(axis=0) if len(rows) else np.zeros(1, np.float32)
    return v / (np.linalg.norm(v) or 1.0)


class WorkspaceBusy(RuntimeError):
    """Another process is writing the workspace and did not finish within the wait."""


_WAITED = [0.0]  # seconds this process spent waiting for workspace locks (a run's time leaves them out)


def lock_wait_seconds() -> float:
    """Seconds this process has waited for workspace locks so far (a run subtracts its share from its time)."""
    return _WAITED[0]


class WorkspaceLock:
    """An OS file lock (``filelock``; released by the kernel if its holder is killed) plus a note of
    who holds it, so the second writer can say whom it waits for."""

    def __init__(self, root: Path, wait: float):
        from filelock import FileLock

        self.root, self.wait = Path(root), wait
        self.lock = FileLock(str(self.root / ".write.lock"))
        self.note = self.root / ".write.lock.json"

    def holder(self) -> str:
        try:
            h = json.loads(self.note.read_text())
            return f"pid {h['pid']} ({h['command']}, since {h['since']})"
        except (OSError, ValueError, KeyError):
            return "another process"

    def __enter__(self):
        from filelock import Timeout

        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            who = self.holder()
            if self.wait <= 0:
                raise WorkspaceBusy(f"workspace {self.root} is being written by {who}; "
                                    "retry later or pass --wait SECONDS") from None
            print(f"waiting up to {self.wait:g}s for workspace {self.root}: written by {who}", file=sys.stderr)
            t = time.perf_counter()
            try:
                self.lock.acquire(timeout=self.wait)
            except Timeout:
                raise WorkspaceBusy(f"workspace {self.root} still being written by {self.holder()} after "
                                    f"{self.wait:g}s; pass --wait SECONDS to wait longer") from None
            finally:
                _WAITED[0] += time.perf_counter() - t
        self.note.write_text(json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv[:3])[:120],
                                         "since": time.strftime("%H:%M:%S")}))
        return self

    def __exit__(self, *exc):
        self.note.unlink(missing_ok=True)
        self.lock.release()


def _crash_point(name: str) -> None:
    """Fault injection for the crash tests: RAGWB_CRASH_AT=<name> kills this process with SIGKILL
    at that point of an ingest, exactly as a kill -9 would; RAGWB_CRASH_AFTER=<n> at the n-th point
    reached, whatever its name (every embedding batch and table step is one)."""
    global _crash_calls
    _crash_calls += 1
    after = os.environ.get("RAGWB_CRASH_AFTER")  # the seeded sweep: killed at the N-th point reached
    if (name and os.environ.get("RAGWB_CRASH_AT") == name) or (after and _crash_calls == int(after)):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


_crash_calls = 0


def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="chunk", file=sys.stderr, leave=False, dynamic_ncols=True)
