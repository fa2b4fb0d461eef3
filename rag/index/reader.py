"""An ingested index in memory: the chunks' columns as arrays, documents, pages and parents read by id (lazily
from LanceDB for an ANN index's lazy rows), opened once per index version."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
import numpy as np
from .bm25 import BM25, cached_bm25
from .workspace import IndexConfig, Workspace
from .tables import mean_page_vector, vectors_of


class ArrowColumn:
    """A read-only sequence over an Arrow string column: the text bytes stay in one Arrow buffer
    instead of a million Python objects (the reader of an ANN index, where memory must stay bounded)."""

    def __init__(self, arr):
        import pyarrow as pa

        self.arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.arr[i].to_pylist()
        return self.arr[int(i)].as_py()

    def __iter__(self):
        for start in range(0, len(self.arr), 65536):  # a slice at a time: bounded temporaries
            yield from self.arr[start:start + 65536].to_pylist()


LAZY_ROWS_CACHE = 4096  # lazily read rows (documents, pages, parents) kept per table


class ArrowRows:
    """A read-only mapping id -> row dict over an Arrow table (documents, pages, parents of an ANN
    index): rows are built on access, never all at once. Built by ``from_table``, the ``lazy``
    columns (the text) stay in LanceDB and are read by row id when a row is asked for (one read for
    many ids with ``prefetch``), with the last ``LAZY_ROWS_CACHE`` rows kept: a million-chunk index
    then holds no document, page or parent text in memory."""

    def __init__(self, table, key: str, source=None, lazy: tuple = (), names: list | None = None):
        """``table``: the eager columns, row i being the source dataset's row at offset i."""
        self.names = names or list(table.column_names)
        self.cols = {c: table.column(c).combine_chunks() for c in table.column_names}
        self._idx = {k: i for i, k in enumerate(self.cols[key].to_pylist())}
        self._source, self._lazy = source, tuple(lazy)
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_table(cls, table, key: str, lazy: tuple = ("text",)) -> "ArrowRows":
        """Over a LanceDB table, read through its Lance dataset at the table's version: an ordered
        scan of the eager columns (offsets 0..n-1), the lazy ones later by offset (``take``: ~0.4 ms
        for a few rows, where LanceDB's ``take_row_ids`` costs ~2.2 ms in its query layer)."""
        ds = table.to_lance()
        names = list(ds.schema.names)
        eager = [c for c in names if c not in lazy]
        return cls(ds.to_table(columns=eager), key, ds, tuple(c for c in lazy if c in names), names)

    def __len__(self) -> int:
        return len(self._idx)

    def __contains__(self, k) -> bool:
        return k in self._idx

    def __iter__(self):
        return iter(self._idx)

    def prefetch(self, keys) -> None:
        """Read the lazy columns of these rows in one LanceDB read (rows already cached are skipped)."""
        if not self._lazy:
            return
        with self._lock:
            todo = sorted({self._idx[k] for k in keys if k in self._idx} - self._cache.keys())
            if not todo:
                return
            t = self._source.take(todo, columns=list(self._lazy))  # rows in the order asked
            cols = {c: t.column(c).to_pylist() for c in self._lazy}
            for j, i in enumerate(todo):
                self._cache[i] = {c: cols[c][j] for c in self._lazy}
            while len(self._cache) > LAZY_ROWS_CACHE:
                self._cache.popitem(last=False)

    def __getitem__(self, k) -> dict:
        i = self._idx[k]
        if not self._lazy:
            return {c: a[i].as_py() for c, a in self.cols.items()}
        with self._lock:
            got = self._cache.get(i)
            if got is not None:
                self._cache.move_to_end(i)
        if got is None:
            self.prefetch([k])
            with self._lock:
                got = self._cache[i]
        return {c: got[c] if c in got else self.cols[c][i].as_py() for c in self.names}

    def get(self, k, default=None):
        return self[k] if k in self._idx else default

    def items(self):
        for k in self._idx:
            yield k, self[k]

    def light_items(self, fields: tuple):
        """(id, {field: value}) for a few small fields (no text): what grouping needs."""
        cols = {f: self.cols[f].to_pylist() for f in fields}
        for k, i in self._idx.items():
            yield k, {f: cols[f][i] for f in fields}


@dataclass
class IndexReader:
    """Arrays over the chunks of one index plus lookups of documents, pages and parents. Below the
    ANN threshold these are Python lists and dicts with the vectors in memory (fastest); with an ANN
    index they are Arrow-backed (ArrowColumn / ArrowRows), the vectors, the BM25 tokens and the text of
    documents, pages and parents stay in LanceDB (read by row id when a strategy packs them), so a
    million-chunk index holds only its chunk text, as compact buffers."""

    index: str
    config: IndexConfig
    chunk_ids: list[str]
    doc_ids: list[str]
    page_ids: list[str]
    chunk_index: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    texts: list[str]
    n_tokens: np.ndarray
    parent_ids: list[str]
    languages: list[str]
    bm25_texts: list[str] | None  # None with an ANN index until the in-memory BM25 is asked for
    vectors: np.ndarray | None  # None when the index has an ANN index: vectors stay in LanceDB
    documents: dict[str, dict]
    pages: dict[str, dict]
    parents: dict[str, dict]
    version: tuple | str = ()  # the snapshot stamp of its tables, else their Lance versions (rag/index/snapshot.py)
    _bm25: BM25 | None = None
    _page_chunks: dict[str, list[int]] | None = None
    _page_vecs: dict[str, np.ndarray] | None = None
    _row_of: dict[str, int] | None = None
    doc_pages_cache: dict | None = None  # doc_id -> [(page_id, page row)] in page order
    rebuilt_cache: dict = field(default_factory=dict)  # page_id -> page text rebuilt from its chunks
    block_cache: dict = field(default_factory=dict)  # (kind, row, budget) -> a code block's text, spans, tokens
    where_masks: dict = field(default_factory=dict)  # a `where` filter -> the chunk rows it keeps
    table: object = None  # the LanceDB chunks table (ANN search, vectors fetched on demand)
    page_vector_table: object = None  # an ANN index's stored page vectors (a Lance dataset) ...
    page_vector_rows: dict | None = None  # ... and page_id -> its offset there
    vector_index: str = "exact"
    bm25_cache: object = None  # a folder for the BM25 postings (the workspace's cache/bm25), keyed by their tokens
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _dataset: object = None  # the chunks table's Lance dataset, opened on first use

    _language: str | None = None
    # source code (rag/ingest/code), per chunk row: language ('' = prose), symbol, kind, 1-based lines
    code_languages: list = field(default_factory=list)
    symbols: list = field(default_factory=list)
    kinds: list = field(default_factory=list)
    line_starts: np.ndarray | None = None
    line_ends: np.ndarray | None = None

    _has_code: bool | None = None
    _symbol_rows: dict | None = None

    @property
    def symbol_rows(self) -> dict[str, list[int]]:
        """qualified symbol -> its chunk rows (a split definition has several), built once."""
        if self._symbol_rows is None:
            out: dict[str, list[int]] = {}
            for i, sym in enumerate(self.symbols):
                if sym:
                    out.setdefault(sym, []).append(i)
            self._symbol_rows = out
        return self._symbol_rows

    _symbols_by_last: dict | None = None

    @property
    def symbols_by_last(self) -> dict[str, list[tuple[str, list[int]]]]:
        """a definition's own name (the last part of its qualified symbol) -> [(qualified symbol, its rows)]: the
        names people type without their full path (rag/index/code_order.named_rows), built once."""
        if self._symbols_by_last is None:
            out: dict = {}
            for sym, rows in self.symbol_rows.items():
                out.setdefault(sym.rsplit(".", 1)[-1], []).append((sym, rows))
            self._symbols_by_last = out
        return self._symbols_by_last

    @property
    def has_code(self) -> bool:
        """Any source code in the index: queries then split identifiers as the chunks' terms were."""
        if self._has_code is None:
            langs = self.code_languages
            if isinstance(langs, ArrowColumn):
                import pyarrow.compute as pc

                self._has_code = bool(pc.any(pc.not_equal(langs.arr, "")).as_py())
            else:
                self._has_code = any(langs)
        return self._has_code

    @property
    def language(self) -> str:
        if self._language is None:
            langs = self.languages
            if isinstance(langs, ArrowColumn):
                import pyarrow.compute as pc

                vc = pc.value_counts(langs.arr).to_pylist()
                self._language = max(vc, key=lambda x: x["counts"])["values"] if vc else "en"
            else:
                self._language = max(set(langs), key=langs.count) if langs else "en"
        return self._language

    @property
    def bm25(self) -> BM25:
        with self._lock:
            if self._bm25 is None:
                if self.bm25_texts is None:  # ANN index: the tokens were left in LanceDB; read them now
                    t = self.dataset.to_table(columns=["chunk_id", "bm25_text"])
                    order = np.argsort([self.rows[c] for c in t.column("chunk_id").to_pylist()])
                    self.bm25_texts = ArrowColumn(t.column("bm25_text").take(order))
                self._bm25 = cached_bm25(self.bm25_cache, self.index, self.bm25_texts)
        return self._bm25

    @property
    def dataset(self):
        """The chunks table's Lance dataset at this reader's version (ANN and full-text queries)."""
        if self._dataset is None:
            self._dataset = self.table.to_lance()
        return self._dataset

    @property
    def rows(self) -> dict[str, int]:
        """chunk_id -> row in the arrays (built once)."""
        if self._row_of is None:
            self._row_of = {c: i for i, c in enumerate(iter(self.chunk_ids))}
        return self._row_of

    def clear_row_caches(self) -> None:
        """Forget the texts and page vectors read for past questions (benchmarks time cold reads)."""
        self._page_vecs = None
        self.rebuilt_cache.clear()
        for rows in (self.documents, self.pages, self.parents):
            if isinstance(rows, ArrowRows):
                with rows._lock:
                    rows._cache.clear()

    def page_chunks(self, page_id: str) -> list[int]:
        """Rows of ALL chunks of a page, in chunk_index order."""
        if self._page_chunks is None:
            pc: dict[str, list[int]] = defaultdict(list)
            for i, p in enumerate(iter(self.page_ids)):
                pc[p].append(i)
            self._page_chunks = {p: sorted(rows, key=lambda r: self.chunk_index[r]) for p, rows in pc.items()}
        return self._page_chunks.get(page_id, [])

    def page_vector(self, page_id: str) -> np.ndarray:
        """A page's embedding: the normalised mean of its chunks' vectors."""
        if self._page_vecs is None:
            self._page_vecs = {}
        v = self._page_vecs.get(page_id)
        if v is None:
            self.prefetch_pages([page_id])
            v = self._page_vecs[page_id]
        return v

    def prefetch_pages(self, page_ids: list[str]) -> None:
        """Page vectors for many pages at once: from the in-memory matrix, or (ANN index: vectors
        stay on disk) with one take of the stored page vectors."""
        if self._page_vecs is None:
            self._page_vecs = {}
        todo = [p for p in dict.fromkeys(page_ids) if p not in self._page_vecs]
        if not todo:
            return
        if self.vectors is not None:
            got = {p: mean_page_vector(self.vectors[self.page_chunks(p)]) for p in todo}
        elif self.page_vector_rows is not None and all(p in self.page_vector_rows for p in todo):
            # the ANN index's page-vector table: one take of the pages' stored vectors
            t = self.page_vector_table.take(sorted(self.page_vector_rows[p] for p in todo),
                                            columns=["page_id", "vector"])
            got = dict(zip(t.column("page_id").to_pylist(), vectors_of(t.column("vector"))))
        else:  # an ANN index built before page vectors were stored: one filtered read of the pages' chunks
            ids = ", ".join("'" + p.replace("'", "''") + "'" for p in todo)
            t = (self.table.search().where(f"page_id IN ({ids})").select(["page_id", "vector"])
                 .limit(sum(len(self.page_chunks(p)) for p in todo) + 1).to_arrow())
            m = vectors_of(t.column("vector"))
            pids = t.column("page_id").to_pylist()
            got = {p: mean_page_vector(m[[i for i, x in enumerate(pids) if x == p]]) for p in todo}
        if len(self._page_vecs) > 200_000:
            self._page_vecs.clear()
        self._page_vecs.update(got)


_readers: dict[tuple[str, str], IndexReader] = {}  # (workspace, index) -> the reader of its current version
_rlock = threading.Lock()


def _versions(ws: Workspace, index: str) -> tuple:
    pv = (ws.read_table(index, "page_vectors").version,) if ws.has_table(f"{index}__page_vectors") else ()
    return tuple(ws.read_table(index, k).version for k in ("chunks", "documents", "pages", "parents")) + pv


def numbers(col) -> np.ndarray:
    """A numeric Arrow column without nulls as a NumPy view of its buffer. Not ``to_numpy``: Arrow's C++ conversion
    imports pandas on first use (~0.2 s of a cold ``ragwb search``); a column with nulls still goes through it."""
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count or not pa.types.is_primitive(arr.type) or pa.types.is_boolean(arr.type):
        return arr.to_numpy(zero_copy_only=False)
    dtype = np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


class _ChunksTable:
    """The chunks table of an index read from its snapshot, opened in LanceDB only if a path needs it (an ANN or
    full-text query, which an exact index read from a snapshot does not make)."""

    def __init__(self, ws: Workspace, index: str):
        self._ws, self._index, self._t = ws, index, None

    def __getattr__(self, name):
        if self._t is None:
            self._t = self._ws.read_table(self._index, "chunks")
        return getattr(self._t, name)


def open_index(ws: Workspace, index: str) -> IndexReader:
    """The reader of the index as its tables are now (one per process and version). An exact index is read from
    its snapshot when one proves current (rag/index/snapshot.py: no pylance import), else from LanceDB, and then
    snapshotted for the next process."""
    from . import snapshot

    key = (str(ws.root.resolve()), index)
    st = snapshot.stamp(ws, index)  # before any read: a snapshot never claims a newer state than it holds
    ver = st if st is not None else _versions(ws, index)
    with _rlock:
        r = _readers.get(key)
        if r is not None and r.version == ver:
            return r
    snap = snapshot.load(ws, index, st) if st is not None else None
    if snap is not None and snap["meta"].get("vector_index", "exact") != "exact":
        snap = None  # (never written for an ANN index; a hand-made one is not read as exact)
    if snap is not None:
        meta, table, ch = snap["meta"], _ChunksTable(ws, index), snap["chunks"]
        kind = "exact"
    else:
        meta = ws.meta(index)
        table = ws.read_table(index, "chunks")
        kind = meta.get("vector_index", "exact")
        if kind == "exact":
            ch = table.to_arrow()
            snap = snapshot.read_lance(ws, index, chunks=ch)
            if st is not None:
                snapshot.save(ws, index, st, meta, snap)
    if kind == "exact":  # exact search over an in-memory copy of the vectors (fast below the ANN threshold)
        vec = ch.column("vector").combine_chunks()
        dim = vec.type.list_size
        vectors = numbers(vec.values[vec.offset * dim:(vec.offset + len(vec)) * dim]).reshape(-1, dim).astype(
            np.float32, copy=False)
    else:  # an ANN index: vectors and BM25 tokens stay in LanceDB; chunk text in Arrow buffers
        ch = table.to_lance().to_table(columns=[c for c in table.schema.names if c not in ("vector", "bm25_text")])
        vectors = None
    lean = vectors is None
    col = (lambda n: ArrowColumn(ch.column(n))) if lean else (lambda n: ch.column(n).to_pylist())  # noqa: E731
    if lean:
        docs = ArrowRows.from_table(ws.read_table(index, "documents"), "doc_id")
        pages = ArrowRows.from_table(ws.read_table(index, "pages"), "page_id")
        parents = ArrowRows.from_table(ws.read_table(index, "parents"), "parent_id")
    else:
        docs = {r["doc_id"]: r for r in snap["documents"].to_pylist()}
        pages = {r["page_id"]: r for r in snap["pages"].to_pylist()}
        parents = {r["parent_id"]: r for r in snap["parents"].to_pylist()}
    r = IndexReader(index, IndexConfig.from_dict(meta["config"]), col("chunk_id"), col("doc_id"), col("page_id"),
                    numbers(ch.column("chunk_index")), numbers(ch.column("start")), numbers(ch.column("end")),
                    col("text"), numbers(ch.column("n_tokens")), col("parent_id"), col("language"),
                    None if lean else col("bm25_text"), vectors, docs, pages, parents, ver, table=table,
                    vector_index=kind)
    if "symbol" in ch.column_names:  # code columns (an index written before them has none: prose)
        r.code_languages, r.symbols, r.kinds = col("code_language"), col("symbol"), col("kind")
        r.line_starts, r.line_ends = numbers(ch.column("line_start")), numbers(ch.column("line_end"))
        from rag.tokens import load_counts

        enc = r.config.chunking.encoding  # the default blocks' exact tokens, counted at ingest
        load_counts(ws.block_counts_path(index, enc), enc)
    if lean and ws.has_table(f"{index}__page_vectors"):  # stored page vectors (an index ingested before them falls back to filtered reads)
        pvd = ws.read_table(index, "page_vectors").to_lance()
        r.page_vector_table = pvd
        r.page_vector_rows = {p: i for i, p in enumerate(pvd.to_table(columns=["page_id"]).column("page_id").to_pylist())}
    r.bm25_cache = ws.bm25_cache
    with _rlock:
        _readers[key] = r
    return r
