import collections

import pytest

from rag.ingest.chunking import ChunkConfig, chunk_document, rebuild_page
from rag.ingest.corpora import load_bundled
from rag.ingest.folders import load_folder
from rag.index.embedders import EmbedderConfig, get_embedder
from rag.index.workspace import IndexConfig, Workspace
from rag.models import Document
from rag.ingest.readers import markdown_pages
from rag.textproc import analyze


@pytest.mark.parametrize("name", ["squad2", "xquad-el", "xquad-ru"])
@pytest.mark.parametrize("chunker", ["tokens", "hierarchy"])
def test_pages_rebuild_exactly_from_chunks(name, chunker):
    ds = load_bundled(name)
    cfg = ChunkConfig(chunker=chunker, chunk_tokens=48, overlap=8)
    for doc in ds.documents[:3]:
        chunks, _ = chunk_document(doc, cfg)
        by_page = collections.defaultdict(list)
        for c in chunks:
            assert doc.text[c.start:c.end] == c.text and c.n_tokens > 0
            by_page[c.page_id].append(c)
        for page in doc.pages:
            cs = by_page[page.page_id]
            assert all(page.start <= c.start and c.end <= page.end for c in cs)  # never crosses a page
            assert [c.chunk_index for c in cs] == list(range(len(cs)))
            assert rebuild_page(cs[::-1]) == page.text  # order restored by chunk_index


def test_hierarchy_leaves_header_paths_and_parents():
    sec = " ".join(f"Sentence number {i} talks about the enterprise segment in detail." for i in range(120))
    text = f"# Findings\n\nIntro.\n\n## Customer Segments\n\n### Enterprise\n\n{sec}\n\n{sec}\n"
    doc = Document("r.md", "r", "en", "reports/r.md", text, markdown_pages("r.md", text), True)
    chunks, parents = chunk_document(doc, ChunkConfig(chunker="hierarchy"))
    ent = [c for c in chunks if c.header_path == ["Findings", "Customer Segments", "Enterprise"]]
    assert ent and all(c.breadcrumb == "[Source: r.md > Findings > Customer Segments > Enterprise]" for c in ent)
    assert all(c.n_tokens <= 500 for c in ent)
    for pid in {c.parent_id for c in ent}:  # short leaves only where no merge fits (the end of a parent)
        leaves = [c for c in ent if c.parent_id == pid]
        assert all(c.n_tokens >= 100 for c in leaves[:-1])
    assert all(c.text.rstrip().endswith(".") for c in ent)  # split at sentence boundaries
    pids = {c.parent_id for c in ent}
    assert all(p.n_tokens <= 2000 for p in parents if p.parent_id in pids)
    assert ent[0].embed_text.startswith("[Source: r.md > Findings")


def test_ingest_idempotent_changed_and_removed(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha text here.\n")
    (root / "b.txt").write_text("beta paragraph.\n\ngamma paragraph.\n")
    ws = Workspace(tmp_path / "ws")
    cfg = IndexConfig(embedder=EmbedderConfig("hash"))
    s1 = ws.ingest(load_folder(root), cfg, progress=False)
    assert (s1.documents, s1.added, s1.embedded) == (2, 2, s1.chunks)
    versions = {k: ws.table(s1.index, k).version for k in ("documents", "pages", "chunks")}
    s2 = ws.ingest(load_folder(root), cfg, progress=False)
    assert (s2.unchanged, s2.added, s2.replaced, s2.embedded, s2.chunks) == (2, 0, 0, 0, s1.chunks)
    assert {k: ws.table(s1.index, k).version for k in versions} == versions  # nothing rewritten
    (root / "b.txt").write_text("beta paragraph changed.\n")
    (root / "a.md").unlink()
    s3 = ws.ingest(load_folder(root), cfg, progress=False)
    assert (s3.replaced, s3.removed, s3.documents) == (1, 1, 1)
    rows = ws.table(s1.index, "chunks").to_arrow().to_pylist()
    assert [r["text"] for r in rows] == ["beta paragraph changed."]


def test_greek_fts_and_e5_multilingual(tmp_path):
    ws = Workspace(tmp_path / "ws")
    el = load_bundled("xquad-el")
    el.documents = el.documents[:1]
    el.questions = [q for q in el.questions if q.evidence[0].doc_id == el.documents[0].doc_id]
    s = ws.ingest(el, IndexConfig(embedder=EmbedderConfig("e5")), progress=False)
    t = ws.table(s.index, "chunks")
    hits = t.search(" ".join(analyze("ΠΆΝΘΕΡΣ", "el")), query_type="fts").limit(3).to_list()
    assert hits and "Πάνθερ" in hits[0]["text"]
    e5 = get_embedder("e5")
    en, ru = load_bundled("xquad-en").questions[0].text, load_bundled("xquad-ru").questions[0].text
    gr = el.questions[0].text
    v = e5.embed_queries([en, ru, gr, "A recipe for chocolate cake with butter."])
    assert v[0] @ v[1] > v[0] @ v[3] and v[0] @ v[2] > v[0] @ v[3]
    # a re-ingest embeds nothing: the content-hash cache
    assert ws.ingest(el, IndexConfig(embedder=EmbedderConfig("e5")), progress=False).embedded == 0


def test_use_fast_embedder_ingests_and_ranks(tmp_path):
    e = get_embedder("use")
    v = e.embed_passages(["The cat sat on the mat.", "A kitten rests on a rug.", "Stock markets fell sharply."])
    assert v.shape == (3, e.dim) and v[0] @ v[1] > v[0] @ v[2]
    ds = load_bundled("xquad-en")
    ds.documents = ds.documents[:2]
    s = Workspace(tmp_path).ingest(ds, IndexConfig(embedder=EmbedderConfig("use")), progress=False)
    assert s.chunks > 0 and s.embedded == s.chunks
