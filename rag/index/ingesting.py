from __future__ import annotations

from .config import VECTOR_INDEX_MODES, IndexConfig
from .summary import IngestSummary
import collections
import os
import sys
import json
import time
from pathlib import Path
import pyarrow as pa
from rag.ingest.chunking import chunk_document
from rag.ingest.corpora import BUNDLED
from .embedders import get_embedder
from .engines import get_engine
from .rows import SCHEMAS, chunk_row, chunk_schema, document_row, page_rows, parent_row  # noqa: F401
from rag.models import Dataset


class IngestSteps:
    """Workspace.ingest and its steps: documents to chunks, vectors and tables in this process or on an engine, the BM25 and block-count caches kept for a fresh process's first search."""

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
        # read through pylance: an unchanged index's re-open (the page's every start) loads no LanceDB
        docs_t = self._columns(index, "documents", ["n_pages", "n_tokens"])
        summ.documents = docs_t.num_rows
        summ.pages = int(pa.compute.sum(docs_t["n_pages"]).as_py() or 0)
        summ.tokens = int(pa.compute.sum(docs_t["n_tokens"]).as_py() or 0)
        summ.chunks = self.read_table(index, "chunks").count_rows()
        summ.blank_pages = self.read_table(index, "pages").count_rows("length(text) = 0")
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
        if summ.vector_index == "exact":  # the tables as Arrow files a cold `ragwb search` maps (rag/index/snapshot.py)
            from .snapshot import refresh

            refresh(self, index)
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
            if d.code_language and cfg.chunking.chunker in ("auto", "code"):
                summ.note_doc_splits(d, chunks)
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
        # --no-progress (a CI log): the estimate first, then a line a minute, so a long ingest is seen moving
        quiet = (QuietProgress(len(texts), name, self.root, cfg.embedder.name,
                               float(os.environ.get("RAGWB_PROGRESS_EVERY") or 60),
                               tokens=sum(int(r["n_tokens"] or 0) for r in chunk_rows))
                 if not progress and texts else None)

        def tick(n):
            if bar:
                bar.update(n)
            if quiet is not None:
                quiet.update(n)
            if not n:  # the cache's first report when it held nothing: no step reached
                return
            if on_progress is not None:
                on_progress(n, len(texts))
            _crash_point("embedding")

        fresh: list[int] = []
        from .rates import LoadOverIngest

        with LoadOverIngest() as load:  # the load the rate kept below ran under, over the whole embedding
            vecs = self.embedding_cache.embed(emb, cfg.embedder.key, texts, "passage", progress=tick, embedded=fresh)
        if bar:
            bar.close()
        # said, never silently cut: the texts embedded now (a cached vector was checked when it was embedded;
        # counting every cached chunk again cost the main job ~3 s of e5 tokenizing)
        summ.note_over_window(emb, [texts[i] for i in fresh], [chunk_ids[i] for i in fresh])
        summ.embed_seconds = time.perf_counter() - te
        summ.embedded = self.embedding_cache.misses - m0  # distinct texts actually embedded
        summ.cache_hits = len(texts) - summ.embedded
        from .rates import keep_rate

        keep_rate(self.root, cfg.embedder.name, summ.embedded, summ.embed_seconds,  # every ingest: the next estimate
                  summ.embedded_tokens or sum(int(chunk_rows[i]["n_tokens"] or 0) for i in fresh), load.others)
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


_crash_calls = 0  # crash points reached in this process (RAGWB_CRASH_AFTER)


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


class QuietProgress:
    """Progress for a log with no bar: the first report (the texts the cache already held) prints the estimate of
    what is left at this machine's rate, then one line every ``every`` seconds: done, rate, time left (issue 74)."""

    def __init__(self, total: int, name: str, workspace, embedder: str, every: float = 60.0, out=None,
                 tokens: int = 0):
        self.total, self.name, self.workspace, self.embedder, self.every = total, name, workspace, embedder, every
        self.tokens = tokens  # of all ``total`` texts: the estimate prices what is left by tokens where it can
        self.out = out or sys.stderr
        self.done, self.first, self.t0, self.last = 0, None, time.monotonic(), time.monotonic()

    def update(self, n: int) -> None:
        now = time.monotonic()
        from .rates import duration_text

        if self.first is None:  # the embedding cache reports what it held first: the rest is what is embedded
            from .rates import estimate_seconds

            self.first, self.t0, self.last = n, now, now
            todo = self.total - self.first
            # by tokens (a grid's 160-token chunks were announced at the 96-token config's chunk rate: 13 s for 22)
            share = round(self.tokens * todo / self.total) if self.total else 0
            secs, src = estimate_seconds(self.workspace, self.embedder, todo, share) if todo > 0 else (0.0, "")
            if todo > 0 and secs >= min(10.0, self.every):  # a few seconds' ingest needs no estimate line
                print(f"ingest: {todo:,} chunk(s) to embed with {self.embedder} for {self.name}, about "
                      f"{duration_text(secs)} at {src}", file=self.out, flush=True)
            self.done = n
            return
        self.done += n
        if now - self.last >= self.every and self.done < self.total:
            self.last = now
            fresh = self.done - self.first
            rate = fresh / max(now - self.t0, 1e-9)
            left = (self.total - self.done) / rate if rate > 0 else float("inf")
            print(f"ingest: {self.name}: embedded {fresh:,} of {self.total - self.first:,} chunk(s), "
                  f"{rate:,.1f} chunks/s, about {duration_text(left)} left", file=self.out, flush=True)


def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    from rag.safeio import printable  # a folder's name in the label: its terminal escapes shown, never sent

    return tqdm(total=total, desc=printable(desc), unit="chunk", file=sys.stderr, leave=False, dynamic_ncols=True)
