from __future__ import annotations

from .config import ANN_MIN_CHUNKS, ANN_ROWS_PER_PARTITION, PAGE_VECTOR_BATCH
import collections
from pathlib import Path
import json
import time
from dataclasses import field
import numpy as np
import pyarrow as pa


class TableUpkeep:
    """The workspace's LanceDB tables kept whole: a table a kill left half-written repaired (its missing files named), rows synced per document, the vector index, page vectors and the full-text index built."""

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
                # read through pylance: checking a whole index needs no LanceDB (its import is ~1.5 s of a page's
                # first screen); a table that cannot be opened is damaged either way
                t = self.read_table(index, kind)
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
                    orphans |= set(self._columns(index, kind, ["doc_id"]).column("doc_id").to_pylist())
            return {}, orphans
        docs = self._columns(index, "documents", ["doc_id", "content_hash", "n_pages", "n_parents", "n_chunks"]
                             ).to_pylist()
        seen = collections.Counter(r["doc_id"] for r in docs)
        counts, dup = {}, set()
        for kind, id_col in (("pages", "page_id"), ("parents", "parent_id"), ("chunks", "chunk_id")):
            if not self.has_table(f"{index}__{kind}"):
                counts[kind] = collections.Counter()
                continue
            t = self._columns(index, kind, ["doc_id", id_col])
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

    def _columns(self, index: str, kind: str, columns: list[str]) -> pa.Table:
        """Only these columns of a table, read through pylance: the check of what an ingest left whole read every
        chunk's vector and text to count ids, and importing LanceDB for it cost a page's first screen ~1.5 s."""
        return self.read_table(index, kind).to_lance().to_table(columns=columns)

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
        if not stale and not rows:  # nothing to write: LanceDB is not even loaded (a fresh index's re-open)
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
            old = self.read_table(index, kind).to_arrow()
            if old.num_rows == data.num_rows and old.column("json").to_pylist() == data.column("json").to_pylist():
                return  # unchanged: keep the table version as it is
        self.db.create_table(name, data=data, mode="overwrite")

    def _vector_index(self, index: str, mode: str, changed: bool) -> tuple[str, float]:
        """``auto``: an ANN index (IVF_HNSW_SQ, cosine) from ANN_MIN_CHUNKS chunks up, exact search below;
        ``ann`` / ``exact`` force it. Rebuilt when the chunks changed."""
        n, have = self._vector_indices(index)
        want = mode == "ann" or (mode == "auto" and n >= ANN_MIN_CHUNKS)
        if not want:
            for name in have:  # exact asked for: an old ANN index must not answer queries
                self.table(index, "chunks").drop_index(name)
            # the page vectors are left in place (the exact reader never reads them): a run still
            # reading them through an ANN reader keeps its snapshot, and an ANN rebuild overwrites them
            return "exact", 0.0
        if have and not changed:
            if not self.has_table(f"{index}__page_vectors"):  # e.g. a process killed between the two steps
                self._write_page_vectors(index)
            return "IVF_HNSW_SQ", 0.0
        from lancedb.index import BTree, IvfHnswSq

        t = self.table(index, "chunks")
        t0 = time.perf_counter()
        t.create_index("vector", config=IvfHnswSq(distance_type="cosine",
                                                  num_partitions=max(1, n // ANN_ROWS_PER_PARTITION)), replace=True)
        t.create_index("page_id", config=BTree(), replace=True)  # fallback page-vector reads filter by page id
        self._write_page_vectors(index)
        return "IVF_HNSW_SQ", time.perf_counter() - t0

    def _vector_indices(self, index: str) -> tuple[int, list[str]]:
        """(chunks, names of the vector indexes on the chunks table), read through pylance: an index re-opened
        unchanged (the page's every start) decides "exact" or "already built" without loading LanceDB."""
        try:
            ds = self.read_table(index, "chunks").to_lance()
            if hasattr(ds, "describe_indices"):  # pylance 14 (list_indices is deprecated there)
                return ds.count_rows(), [i.name for i in ds.describe_indices() if list(i.field_names) == ["vector"]]
            return ds.count_rows(), [i["name"] for i in ds.list_indices() if list(i["fields"]) == ["vector"]]
        except (KeyError, TypeError, AttributeError):  # a pylance whose index listing reads otherwise
            t = self.table(index, "chunks")
            return t.count_rows(), [i.name for i in t.list_indices() if list(i.columns) == ["vector"]]

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
