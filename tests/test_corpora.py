import json

import pytest
from pypdf import PdfWriter

from conftest import tree_hashes, write_docx
from rag.ingest.corpora import load_bundled, load_squad
from rag.ingest.folders import load_folder


def test_squad2_bundled_importer():
    ds = load_bundled("squad2")
    assert len(ds.questions) >= 500 and not ds.skipped
    unans = [q for q in ds.questions if not q.answerable]
    assert unans and all(q.answers == [] for q in unans)
    for q in ds.questions:
        doc = ds.doc(q.evidence[0].doc_id)
        for ev in q.evidence:
            page = next(p for p in doc.pages if p.page_id == ev.page_id)
            assert doc.text[page.start:page.end] == page.text
            if ev.start is not None:  # the span lands inside its page and holds the answer
                assert page.start <= ev.start < ev.end <= page.end
                assert doc.text[ev.start:ev.end] == ev.text


def test_xquad_parallel_ids_and_scripts():
    en, el, ru = (load_bundled(f"xquad-{l}") for l in ("en", "el", "ru"))
    assert [q.qid for q in en.questions] == [q.qid for q in el.questions] == [q.qid for q in ru.questions]
    assert all(q.answerable for q in el.questions)
    assert any("\u0370" <= ch <= "\u03ff" for ch in el.documents[0].text)
    assert any("\u0400" <= ch <= "\u04ff" for ch in ru.documents[0].text)
    q = el.questions[0]
    ev = q.evidence[0]
    assert el.doc(ev.doc_id).text[ev.start:ev.end] == ev.text == q.answers[0]


def test_docugami_bundled_importer():
    ds = load_bundled("docugami")
    assert len(ds.documents) == 3 and len(ds.questions) >= 30 and not ds.skipped
    assert all(len(d.pages) > 5 for d in ds.documents)
    names = {d.doc_id for d in ds.documents}
    for q in ds.questions:
        assert q.evidence and all(e.page_id is None and e.doc_id in names for e in q.evidence)


def _bad_folder(root):
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nIntro text about alpha.\n\n## Setup\n\nInstall beta first.\n")
    (root / "notes.txt").write_text("First paragraph.\n\nSecond paragraph about gamma.\n")
    (root / "page.html").write_text("<html><body><h1>Title</h1><p>Hello omega world.</p></body></html>")
    write_docx(root / "report.docx", ["Quarterly report", "Revenue grew by delta percent."])
    (root / "empty.txt").write_text("")
    (root / "binary.txt").write_bytes(b"\x00\x01\x02binary\x00")
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf")
    (root / "broken.docx").write_bytes(b"PK\x03\x04 not a zip at all")
    w = PdfWriter()
    w.add_blank_page(200, 200)
    w.encrypt("secret")
    with open(root / "locked.pdf", "wb") as f:
        w.write(f)


def test_folder_import_bad_files_are_skipped_with_reasons(tmp_path):
    root = tmp_path / "corpus"
    _bad_folder(root)
    qpath = tmp_path / "q.jsonl"
    qpath.write_text("\n".join([
        json.dumps({"id": "q1", "question": "What to install first?", "answers": ["beta"],
                    "evidence": [{"doc": "guide.md", "text": "Install beta first."}]}),
        "{not json",
        json.dumps({"id": "q2", "answers": ["x"]}),
        json.dumps({"id": "q3", "question": "Where?", "answers": ["x"], "evidence": [{"doc": "missing.md"}]}),
        json.dumps({"id": "q4", "question": "Unanswerable?", "answers": []}),
    ]) + "\n")
    before = tree_hashes(root)
    ds = load_folder(root, qpath)
    assert tree_hashes(root) == before  # no source file modified
    assert sorted(d.doc_id for d in ds.documents) == ["guide.md", "notes.txt", "page.html", "report.docx"]
    reasons = {s.path.split("/")[-1] + (f":{s.line}" if s.line else ""): s.reason for s in ds.skipped}
    assert "empty" in reasons["empty.txt"]
    assert "binary" in reasons["binary.txt"]
    assert "UTF-8" in reasons["latin1.txt"]
    assert "corrupt" in reasons["corrupt.pdf"]
    assert "encrypted" in reasons["locked.pdf"]
    assert "DOCX" in reasons["broken.docx"]
    assert "JSON" in reasons["q.jsonl:2"]
    assert "question" in reasons["q.jsonl:3"]
    assert "unknown document 'missing.md'" in reasons["q.jsonl:4"]
    assert [q.qid for q in ds.questions] == ["q1", "q4"]
    q1 = ds.questions[0]
    guide = ds.doc("guide.md")
    assert guide.text[q1.evidence[0].start:q1.evidence[0].end] == "Install beta first."
    assert q1.evidence[0].page_id == guide.pages[1].page_id  # the "## Setup" section
    assert not ds.questions[1].answerable
    assert "Revenue grew" in ds.doc("report.docx").text


def test_squad_importer_rejects_non_squad(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match="x.json"):
        load_squad(p)
