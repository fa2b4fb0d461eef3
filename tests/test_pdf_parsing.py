"""PDFs read by pdfium (pypdf where pdfium cannot), and folders parsed in worker processes (issue 74, item 2).
Real PDF files (tests/pdfgen.py and the bundled filings), real worker processes, a real kill -9."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pdfgen import make_pdf
from rag.ingest.bundled import datasets_root
from rag.ingest.folders import load_folder
from rag.ingest.parse_pool import parse_workers
from rag.ingest.readers import ImportError_, ParseCache, read_pdf_pages

FILINGS = sorted((datasets_root() / "docugami" / "docs").glob("*.pdf"))


def test_pdfium_gives_the_pages_pypdf_gives(tmp_path, monkeypatch):
    pdf = make_pdf(tmp_path / "a.pdf", [["Depot seven stores 12 crates.", "Third inter-", "national page."], [],
                                        ["Last page, caf\xe9 open."]])
    pdfium = read_pdf_pages(pdf)
    monkeypatch.setenv("RAGWB_PDF_PARSER", "pypdf")
    pypdf = read_pdf_pages(pdf)
    # one page per physical page (blank kept, so gold "page 2" is the page a viewer shows); the hyphen at a line
    # end comes back as pypdf writes it, which evidence matching folds
    assert len(pdfium) == 3 and pdfium[1] == ""
    assert pdfium[0] == "Depot seven stores 12 crates.\nThird inter-\nnational page."
    assert [p.split() for p in pdfium] == [p.split() for p in pypdf]


def test_an_unknown_parser_name_is_an_error_naming_the_valid_ones(tmp_path, monkeypatch, capsys):
    pdf = make_pdf(tmp_path / "a.pdf", [["Hello."]])
    monkeypatch.setenv("RAGWB_PDF_PARSER", "pdfminer")
    with pytest.raises(ValueError, match=r"'pdfminer' is not a PDF parser \(valid: pdfium, pypdf\)"):
        read_pdf_pages(pdf)
    with pytest.raises(ValueError, match="'pdfminer' is not a PDF parser"):  # a folder: before any file is read
        load_folder(pdf.parent)
    from evals.cli import main

    assert main(["ingest", str(pdf.parent), "--workspace", str(tmp_path / "ws"), "--embedder", "hash",
                 "--no-progress"]) == 2  # `ragwb ingest`: one line naming the variable, nothing stored
    assert "RAGWB_PDF_PARSER='pdfminer' is not a PDF parser (valid: pdfium, pypdf)" in capsys.readouterr().err
    assert not (tmp_path / "ws" / "lancedb").exists()


def test_a_file_neither_parser_reads_names_both(tmp_path):
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4\n" + b"\x8f junk " * 40)
    with pytest.raises(ImportError_) as e:
        read_pdf_pages(bad)
    assert str(e.value).startswith(f"{bad}: corrupt or unreadable PDF (pdfium: ") and "; pypdf: " in str(e.value)


def test_the_filings_read_page_for_page():
    """The bundled filings by both parsers: the same page count, each page's words the same words (scripts/
    compare_pdf_parsers.py measures it on a folder: 0 pages moved of 891 on 18 Docugami filings)."""
    for f in [p for p in FILINGS if "AAPL" in p.name]:  # the shortest: pypdf takes seconds a filing
        pdfium = read_pdf_pages(f)
        os.environ["RAGWB_PDF_PARSER"] = "pypdf"
        try:
            pypdf = read_pdf_pages(f)
        finally:
            del os.environ["RAGWB_PDF_PARSER"]
        assert len(pdfium) == len(pypdf) > 20
        same = [len(set(a.split()) & set(b.split())) / max(len(set(a.split()) | set(b.split())), 1)
                for a, b in zip(pdfium, pypdf)]
        assert min(same) > 0.8 and sum(same) / len(same) > 0.95, (f.name, min(same))


def _folder_of_filings(tmp_path: Path, copies: int) -> Path:
    folder = tmp_path / "filings"
    folder.mkdir()
    for k in range(copies):
        for f in FILINGS:
            # a byte appended after %%EOF: another file to the parse cache (its own sha256), the same pages
            (folder / f"{k}-{f.name}").write_bytes(f.read_bytes() + b"\n%" + str(k).encode() + b"\n")
    return folder


def _pages(ds):
    return [(d.doc_id, [(p.page_id, p.start, p.end, p.text) for p in d.pages], d.text) for d in ds.documents]


def test_workers_give_the_same_documents_in_the_same_order_and_fill_the_cache(tmp_path, monkeypatch):
    folder = _folder_of_filings(tmp_path, 2)
    (folder / "notes.md").write_text("# Notes\n\nDepot seven stores 12 crates.\n")
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "1")
    alone = load_folder(folder)
    cache = ParseCache(tmp_path / "cache", shipped=tmp_path / "none")
    files = [(p, p.name) for p in sorted(folder.iterdir())]
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "2")
    workers, todo = parse_workers(files, cache)
    assert workers == 2 and sorted(p.name for p, _ in todo) == sorted(p.name for p in folder.glob("*.pdf"))
    pooled = load_folder(folder, parse_cache=cache)
    assert _pages(pooled) == _pages(alone) and not pooled.skipped
    assert [d.doc_id for d in pooled.documents] == sorted(p.name for p in folder.iterdir())
    # each worker wrote its file's cache entry: the next load has nothing left for a pool
    assert all(cache.has(cache.key(p)) for p in folder.glob("*.pdf"))
    assert parse_workers(files, cache) == (0, [])


def test_the_pool_is_as_wide_as_the_work_pays_for(tmp_path, monkeypatch):
    small = tmp_path / "small"
    small.mkdir()
    for i in range(4):
        make_pdf(small / f"{i}.pdf", [[f"Page {i}."]])
    (small / "page.html").write_text("<h1>Depot</h1><p>Seven crates.</p>")
    files = [(p, p.name) for p in sorted(small.iterdir())]
    monkeypatch.delenv("RAGWB_PARSE_WORKERS", raising=False)
    # a few KB: one worker for the PDFs (pdfium is C: a crash takes a worker down, never the ingest), not a pool
    assert parse_workers(files, None) == (1, [(p, n) for p, n in files])
    assert parse_workers([f for f in files if f[1].endswith(".html")], None) == (0, [])  # markitdown: in process
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "0")
    assert parse_workers(files, None) == (0, [])
    ds = load_folder(small)  # in this process, the same documents
    monkeypatch.delenv("RAGWB_PARSE_WORKERS")
    assert _pages(load_folder(small)) == _pages(ds) and len(ds.documents) == 5
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "two")
    with pytest.raises(ValueError, match="RAGWB_PARSE_WORKERS='two' is not a worker count"):
        parse_workers(files, None)


def _workers_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z" and b"rag.ingest.parse_pool" in cmd:  # alive, not reaped
            out.append(int(d.name))
    return out


def test_a_worker_killed_mid_folder_loses_no_file(tmp_path, monkeypatch):
    folder = _folder_of_filings(tmp_path, 3)
    monkeypatch.setenv("RAGWB_PARSE_WORKERS", "2")
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("ds", load_folder(folder)))
    t.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and t.is_alive() and time.monotonic() < deadline:
        pids = _workers_of(os.getpid())
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.01)
    t.join(300)
    assert killed is not None, "no worker process was seen"
    ds = result["ds"]
    assert not ds.skipped and len(ds.documents) == 3 * len(FILINGS)
    assert all(len(d.pages) > 20 for d in ds.documents)


def test_a_file_past_the_time_cap_is_skipped_named_and_the_ingest_ends(tmp_path, monkeypatch):
    """RAGWB_PARSE_TIMEOUT caps a worker's time on one file (a hostile PDF that hangs its parser): here a PDF whose
    one page takes pdfium ~5 s against the 1 s cap (the least allowed), so it is killed twice and skipped with the
    cap named; the Markdown beside it is read."""
    from pdfgen import make_heavy_pdf

    folder = tmp_path / "docs"
    folder.mkdir()
    make_heavy_pdf(folder / "a.pdf", 10)
    (folder / "b.md").write_text("# B\n\nDepot eight stores 3 crates.\n")
    monkeypatch.setenv("RAGWB_PARSE_TIMEOUT", "1")
    ds = load_folder(folder)
    assert [d.doc_id for d in ds.documents] == ["b.md"]
    assert [(Path(s.path).name, s.reason) for s in ds.skipped] == [
        ("a.pdf", "the parser's process died reading this file twice (took over 1 s (RAGWB_PARSE_TIMEOUT))")]
