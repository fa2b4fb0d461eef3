"""The LanceDB workspace: documents, pages, parents and chunks tables per index.

An *index* is one dataset under one ``IndexConfig`` (chunking + embedder); its tables
are named ``<dataset>__<hash8>__<kind>`` so indexes with different configs live side
by side. Ingest is a sync: an unchanged document (same content hash) is left alone,
a changed one has its rows replaced, a vanished one is removed. Chunks carry a
``bm25_text`` column (language-aware analysed tokens) with a LanceDB full-text index.
"""
from __future__ import annotations

from .config import IndexConfig
from .locks import WorkspaceLock, lock_wait_default
from .ingesting import IngestSteps
from .tables import TableUpkeep
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path


from rag.ingest.chunking import ChunkConfig, chunk_document
from rag.ingest.corpora import BUNDLED
from rag.ingest.readers import slug
from .embedders import EmbeddingCache
from .rows import SCHEMAS, chunk_row, chunk_schema, document_row, page_rows, parent_row  # noqa: F401
from rag.safeio import write_whole
from rag.models import Dataset, Question

DEFAULT_WORKSPACE = Path("results")


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


class Workspace(IngestSteps, TableUpkeep):
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
        return list(self.embed_work(ds, cfg))

    def embed_work(self, ds: Dataset, cfg: "IndexConfig") -> dict[str, int]:
        """Embedding-cache key -> tokens (the chunk's exact count) of every text an ingest would embed now: what an
        estimate prices (rates are per token: a 350-token leaf costs what 3 chunks of 128 do). The chunks of changed
        documents that are neither in the embedding cache nor in the set's shipped vectors; nothing is written."""
        from .shipped import manifest

        if (ds.name in BUNDLED and manifest().get(ds.name, {}).get("embedder_key") == cfg.embedder.key
                and cfg.chunking == ChunkConfig()):
            return {}  # seeded from the shipped vectors (another chunking is counted below: index axes sweep it)
        existing, dirty = (self._verified_documents(self.index_name(ds.name, cfg))
                           if self.has_table(f"{self.index_name(ds.name, cfg)}__documents") else ({}, set()))
        chunks = [c for d in ds.documents if existing.get(d.doc_id) != d.index_hash or d.doc_id in dirty
                  for c in chunk_document(d, cfg.chunking)[0]]
        cache = self.embedding_cache
        by_key = {cache._key(cfg.embedder.key, "passage", c.embed_text): c for c in chunks}
        keys = list(by_key)
        found: set = set()
        with cache._lock:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                found.update(k for (k,) in cache.db.execute(
                    f"SELECT k FROM emb WHERE k IN ({','.join('?' * len(part))})", part).fetchall())
        from .rates import work_tokens

        # tokens counted only for what is to embed (a page opening an ingested folder counts nothing)
        todo = [k for k in keys if k not in found]
        counts = work_tokens(cfg.embedder.name, [by_key[k].embed_text for k in todo], [by_key[k].n_tokens for k in todo])
        return dict(zip(todo, counts))

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
        from rag.ingest.readers import ParseCache

        return ParseCache(self.root / "cache" / "parsed")

    def writer_lock(self, wait: float | None = None):
        """Serialise writers of this workspace (``ragwb ingest`` and the ingest step of ``ragwb run``)."""
        return WorkspaceLock(self.root, lock_wait_default() if wait is None else wait)

    def dataset_path(self, name: str) -> Path:
        """Where LanceDB keeps the local table ``name``: the Lance dataset ``lancedb/NAME.lance``."""
        return self.root / "lancedb" / f"{name}.lance"

    def table_uri(self, index: str, kind: str) -> str:
        """Where a table's Lance dataset lives (engines write it directly, e.g. through lance-ray)."""
        return str(self.dataset_path(f"{index}__{kind}").resolve())

    KINDS = ("documents", "pages", "parents", "chunks", "questions", "meta", "page_vectors")




