import pytest

from rag.answer.answerers import ExtractiveAnswerer
from rag.index.embedders import EmbedderConfig
from rag.index.workspace import IndexConfig, Workspace
from rag.models import Dataset, Document, pages_from_paragraphs
from rag.ingest.chunking import ChunkConfig
from rag.answer.prompts import FALLBACK, build_messages, parse_citations, prompt_tokens
from rag.index.retrieval import Retriever
from rag.strategies import (FullDocumentsStrategy, make_params, pack_blocks, retrieve, rrf_fusion, weighted_fusion,
                            STRATEGIES, default_strategies)
from rag.tokens import count_tokens


def _doc(doc_id, paras):
    text, pages = pages_from_paragraphs(doc_id, paras)
    return Document(doc_id, doc_id, "en", doc_id, text, pages)


@pytest.fixture
def kw_index(tmp_path):
    docs = [
        _doc("d1", ["alpha alpha alpha.", "alpha beta."]),          # 2 alpha-ish chunks
        _doc("d2", ["alpha gamma gamma gamma.", "delta only."]),
        _doc("d3", ["omega omega. " * 40]),                          # a long document
    ]
    ws = Workspace(tmp_path / "ws")
    cfg = IndexConfig(ChunkConfig(chunker="tokens", chunk_tokens=64, overlap=0), EmbedderConfig("keywords"))
    s = ws.ingest(Dataset("kw", docs, []), cfg, progress=False)
    return Retriever(ws, s.index)


def test_registry_errors_name_valid_options():
    assert set(STRATEGIES) == {"chunks", "full_documents", "two_phase_pages", "hybrid", "parent_child", "routed",
                               "escalate"}
    from rag.strategies import default_strategies

    assert default_strategies() == ["chunks", "full_documents", "two_phase_pages", "hybrid", "parent_child"]
    with pytest.raises(KeyError, match="valid: chunks, full_documents"):
        make_params("nope")
    with pytest.raises(ValueError, match="valid: max_context_tokens"):
        make_params("chunks", topk=3)
    assert make_params("hybrid").alpha == 0.8 and make_params("hybrid").rrf_k == 60
    assert make_params("two_phase_pages").candidates == 50 and make_params("parent_child").max_parents == 4
    assert make_params("full_documents").max_total_chars == 80000 and make_params("chunks").top_k == 8


def test_full_documents_ranking_by_hits_then_mean():
    ranked = FullDocumentsStrategy.rank_documents(["a", "b", "b", "c", "a", "c"], [0.9, 0.5, 0.6, 0.8, 0.1, 0.9])
    # a: 2 hits mean 0.5; b: 2 hits mean 0.55; c: 2 hits mean 0.85 -> c, b, a
    assert [d for d, _, _ in ranked] == ["c", "b", "a"]
    assert FullDocumentsStrategy.rank_documents(["x", "y", "y"], [0.99, 0.1, 0.1])[0][0] == "y"


def test_full_documents_budget_overflow_and_fallback(kw_index, tmp_path):
    r = kw_index
    q = "alpha alpha"
    ctx = retrieve(r, "full_documents", q, top_k=3)
    assert [b.doc_ids[0] for b in ctx.blocks][:1] == ["d1"] and ctx.counters["docs_loaded"] >= 1
    d1 = len(r.reader.documents["d1"]["text"])
    # first document alone over budget -> included truncated to the budget
    ctx = retrieve(r, "full_documents", q, top_k=3, max_total_chars=10)
    assert len(ctx.blocks) == 1 and len(ctx.blocks[0].text) == 10 and ctx.blocks[0].text == r.reader.documents["d1"]["text"][:10]
    # stop at the first that does not fit vs skip it and try the next
    big = retrieve(r, "full_documents", "omega alpha", top_k=6)
    order = [b.doc_ids[0] for b in big.blocks]
    budget = d1 + 5
    stop = retrieve(r, "full_documents", "alpha alpha", top_k=6, max_total_chars=budget, on_overflow="stop")
    skip = retrieve(r, "full_documents", "alpha alpha", top_k=6, max_total_chars=budget, on_overflow="skip")
    assert [b.doc_ids[0] for b in stop.blocks] == ["d1"]
    assert sum(len(b.text) for b in skip.blocks) <= budget and len(skip.blocks) >= 1
    assert order
    # no document loadable (sources missing) -> falls back to chunks and says so
    fb = retrieve(r, "full_documents", q, top_k=3, load_from="source")
    assert fb.counters["docs_loaded"] == 0 and fb.counters["fallback"] == "chunks"
    assert all(b.group == "chunks" for b in fb.blocks) and len(fb.blocks) == 3


def test_two_phase_pages_rebuilds_and_keeps_duplicates(kw_index):
    r = kw_index
    ctx = retrieve(r, "two_phase_pages", "alpha", top_chunks=2, top_pages=2, candidates=4)
    groups = [b.group for b in ctx.blocks]
    assert groups == ["chunks", "chunks", "pages", "pages"]
    for b in ctx.blocks[2:]:
        assert b.text == r.reader.pages[b.page_ids[0]]["text"]  # whole page, chunk_index order
    chunk_pages = {b.page_ids[0] for b in ctx.blocks[:2]}
    assert chunk_pages & {b.page_ids[0] for b in ctx.blocks[2:]}  # duplicates kept across groups
    assert ctx.counters["pages_rebuilt"] >= 2


def test_parent_child_dedupes_by_parent(kw_index):
    ctx = retrieve(kw_index, "parent_child", "omega", top_k=20, max_parents=2)
    pids = [b.page_ids[0] for b in ctx.blocks]
    assert len(ctx.blocks) <= 2 and len(set(pids)) == len(pids)


def test_hybrid_fusion_hand_computed():
    dense = {"a": 0.9, "b": 0.7, "c": 0.5}
    bm25 = {"b": 10.0, "c": 5.0, "d": 0.0}
    # min-max: dense a=1, b=.5, c=0 ; bm25 b=1, c=.5, d=0
    fused = dict(weighted_fusion(dense, bm25, 0.8))
    assert fused["a"] == pytest.approx(0.8) and fused["b"] == pytest.approx(0.8 * 0.5 + 0.2)
    assert fused["c"] == pytest.approx(0.1) and fused["d"] == pytest.approx(0.0)
    rrf = dict(rrf_fusion([["a", "b", "c"], ["b", "c", "d"]], 60))
    assert rrf["b"] == pytest.approx(1 / 62 + 1 / 61) and rrf["a"] == pytest.approx(1 / 61)
    assert max(rrf, key=rrf.get) == "b"


def test_packing_never_exceeds_budget_and_policies(kw_index):
    r = kw_index
    for budget in (5, 20, 60, 200):
        for pol in ("truncate", "drop"):
            for name in default_strategies():
                ctx = retrieve(r, name, "omega alpha", max_context_tokens=budget, overflow=pol)
                assert ctx.context_tokens <= budget
                assert all(b.n_tokens == count_tokens(b.text) for b in ctx.blocks)
                assert [b.n for b in ctx.blocks] == list(range(1, len(ctx.blocks) + 1))
    raw = [("One. Two. Three.", "chunks", ("d",), ("p",), ("c",), (("d", 0, 16),), count_tokens("One. Two. Three."), 1.0)]
    cut = pack_blocks(raw, make_params("chunks", max_context_tokens=4), "o200k_base")
    assert cut[0].text == "One. Two." and cut[0].truncated
    assert pack_blocks(raw, make_params("chunks", max_context_tokens=4, overflow="drop"), "o200k_base") == []


def test_candidate_cache_reused_by_packing_budgets(kw_index):
    r = kw_index
    retrieve(r, "chunks", "alpha beta", top_k=2)
    misses = r.stats["pool_misses"]
    for k in (1, 2, 3):
        retrieve(r, "chunks", "alpha beta", top_k=k, max_context_tokens=50)
    retrieve(r, "hybrid", "alpha beta", alpha=0.3)
    assert r.stats["pool_misses"] == misses


def test_offline_answerer_cites_existing_blocks_and_falls_back(kw_index):
    r = kw_index
    a = ExtractiveAnswerer()
    ctx = retrieve(r, "chunks", "gamma", top_k=3)
    ans = a.answer("Where is gamma?", ctx.blocks)
    cites = parse_citations(ans.text)
    assert cites and all(1 <= c <= len(ctx.blocks) for c in cites)
    assert "gamma" in ans.text
    assert a.answer("What is the capital of Peru?", ctx.blocks).text == FALLBACK
    assert a.answer("gamma?", []).text == FALLBACK
    msgs = build_messages("q?", ctx.blocks)
    assert "[1]" in msgs[1]["content"] and FALLBACK in msgs[0]["content"]
    assert prompt_tokens(msgs) == sum(count_tokens(m["content"]) + 3 for m in msgs) + 3


def test_full_documents_stop_versus_skip_hand_built(tmp_path):
    # A: 3 hits, short; B: 2 hits, long; C: 1 hit, short  ->  ranked A, B, C
    docs = [_doc("A", ["alpha one.", "alpha two.", "alpha three."]),
            _doc("B", ["alpha four.", "alpha five."] + ["omega filler text. " * 20] * 6),
            _doc("C", ["alpha six."])]
    ws = Workspace(tmp_path / "ws")
    cfg = IndexConfig(ChunkConfig(chunker="tokens", chunk_tokens=64, overlap=0), EmbedderConfig("keywords"))
    r = Retriever(ws, ws.ingest(Dataset("abc", docs, []), cfg, progress=False).index)
    full = retrieve(r, "full_documents", "alpha", top_k=6)
    assert [b.doc_ids[0] for b in full.blocks] == ["A", "B", "C"]
    la, lc = (len(r.reader.documents[d]["text"]) for d in ("A", "C"))
    budget = la + lc + 5  # B does not fit after A; C does
    stop = retrieve(r, "full_documents", "alpha", top_k=6, max_total_chars=budget, on_overflow="stop")
    skip = retrieve(r, "full_documents", "alpha", top_k=6, max_total_chars=budget, on_overflow="skip")
    assert [b.doc_ids[0] for b in stop.blocks] == ["A"] and stop.counters["docs_loaded"] == 1
    assert [b.doc_ids[0] for b in skip.blocks] == ["A", "C"] and skip.counters["docs_loaded"] == 2
    assert skip.blocks[1].text == r.reader.documents["C"]["text"]  # whole documents, not chunks


def test_truncated_block_reuses_its_parents_sentences_and_hits_exactly():
    """A truncated block (a prefix of a text answered before) gets its sentences and question hits
    from the longer text's for the part both share; pinned equal to computing them from scratch at
    every kind of cut: mid-word, after a sentence end, inside an abbreviation, inside a newline run,
    between a '.' and the "[n]" the sentence splitter looks ahead to."""
    from rag.answer import answerers as A
    from rag.ingest.corpora import load_bundled
    from rag.textproc import analyze, note_prefix

    messy = ("Dr. Smith moved to the U.S. in 1990. He said \"hi.\" [1] Then he left.\n\n\nNew para: 3.5 "
             "is a number, e.g. pi. a. one\nb. two [12] end!? ok. It rose.[17] Then fell.[2][3] J. K. Rowling wrote "
             "it [3][4]. Last one")
    texts = [messy, messy.replace("\n", " \n"), *[d.text[:6000] for d in load_bundled("squad2").documents[:3]]]
    questions = ["Where did Smith move in 1990?", "Who wrote it?", "What is the number?",
                 "When did the Normans conquer England?", "What did the people of the region speak?"]
    checked = 0
    for parent in texts:
        cuts = sorted({*range(1, len(parent), 37), *(i + d for i in range(len(parent)) if parent[i] in ".\n["
                                                      for d in (0, 1, 2))} - {0, len(parent)})
        for q in questions:
            qterms = tuple(dict.fromkeys(analyze(q, "en", stopwords=True)))
            A._RAW.clear()
            A._HITS.clear()
            A._split_cached.cache_clear()
            A._sentence_hits(parent, "en", qterms)  # the parent answered first, at another budget
            for cut in cuts if len(parent) < 1000 else cuts[:: max(1, len(cuts) // 60)]:
                child = parent[:cut]
                note_prefix(child, parent)
                reused = A._sentence_hits(child, "en", qterms)
                raw_reused = A._RAW[child][0]
                A._RAW.pop(child)
                assert A._scan(child)[0] == raw_reused, (parent[:cut][-40:], cut)
                assert A._hits(child, "en", qterms) == reused, (child[-40:], q)
                checked += 1
    assert checked > 500
    # a noted prefix that no longer is one (the registry is only a hint) is computed from scratch
    note_prefix("Dr. Who", messy)
    assert A._sentence_hits("Dr. Who", "en", ("who",)).n_sents == 1


def test_bm25_scores_do_not_depend_on_the_process_hash_seed(tmp_path):
    """BM25 sums its terms' float32 contributions in the query's order, never a set's (a set's order
    changes with PYTHONHASHSEED, and a resumed run must score exactly as the run it resumes)."""
    import subprocess
    import sys

    code = ("import numpy as np, hashlib\nfrom rag.index.retrieval import BM25\n"
            "docs = [['alpha', 'beta', 'gamma', 'delta'] * 3, ['beta', 'omega', 'kappa'], ['gamma', 'zeta', 'eta', 'alpha']]\n"
            "b = BM25(docs)\nq = ['zeta', 'alpha', 'kappa', 'gamma', 'beta', 'eta', 'omega', 'delta']\n"
            "print(hashlib.md5(b.scores(q).tobytes()).hexdigest())\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout.strip()
            for seed in range(6)}
    assert len(outs) == 1 and len(next(iter(outs))) == 32


def test_bm25_postings_are_cached_by_their_tokens(tmp_path):
    """A fresh process reads the BM25 postings a process before it built (the cold `ragwb search`); the cache is
    keyed by a digest of the tokens, so a table rebuilt over other text never reads them; a file that does not
    load is built again; and what it holds is what scores (the test can fail: a doctored file changes scores)."""
    import numpy as np

    from rag.index import reader as retrieval
    from rag.index.reader import BM25, open_index

    docs = [_doc(f"d{i}", [f"alpha beta {w} gamma {i}"]) for i, w in enumerate(["river", "mountain", "valley", "ocean"])]
    ws = Workspace(tmp_path)
    s = ws.ingest(Dataset("bm", docs, []), IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    q = ["valley", "alpha", "gamma"]
    built = open_index(ws, s.index).bm25
    (f,) = (tmp_path / "cache" / "bm25").glob(f"{s.index}-*.npz")
    retrieval._readers.clear()  # a fresh process
    loaded = open_index(ws, s.index).bm25
    assert loaded is not built and loaded.vocab == built.vocab
    assert np.array_equal(loaded.scores(q), built.scores(q)) and int(np.argmax(loaded.scores(q))) == 2
    doctored = BM25.load(f)
    lo, hi = doctored.offsets[doctored.vocab["valley"]:doctored.vocab["valley"] + 2]
    doctored.doc_ids[lo:hi] = 0  # the file says "valley" is in d0
    doctored.save(f)
    retrieval._readers.clear()
    assert int(np.argmax(open_index(ws, s.index).bm25.scores(q))) == 0  # read, not rebuilt
    f.write_bytes(b"not an npz")
    retrieval._readers.clear()
    assert np.array_equal(open_index(ws, s.index).bm25.scores(q), built.scores(q))  # built again ...
    assert np.array_equal(BM25.load(f).scores(q), built.scores(q))  # ... and saved again
    docs[2] = _doc("d2", ["alpha beta lake gamma 2"])
    s2 = ws.ingest(Dataset("bm", docs, []), IndexConfig(embedder=EmbedderConfig("hash")), progress=False)
    assert s2.index == s.index
    retrieval._readers.clear()
    assert open_index(ws, s.index).bm25.scores(["valley"]).max() == 0  # the new tokens, not the old file's
    assert [p.name for p in (tmp_path / "cache" / "bm25").glob("*.npz")] != [f.name]  # the old one replaced
