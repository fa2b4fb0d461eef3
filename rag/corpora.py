"""Importers: SQuAD 2.0 / SQuAD 1.1 (XQuAD) JSON, Docugami-style CSV + PDFs, and a
user's own folder of .md/.txt/.pdf/.docx/.html files with a JSONL question file.

Every importer is tolerant: a bad file or a bad gold line becomes a ``Skipped``
entry that names the file (and line) and says why; everything else still loads.
Source files are only ever opened for reading.
"""
from __future__ import annotations

import csv
import fnmatch
import gzip
import json
import os
import re
import unicodedata
from pathlib import Path

from .models import Dataset, Document, Evidence, Page, Question, Skipped, pages_from_paragraphs

REPO_ROOT = Path(__file__).resolve().parents[1]
SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".pdf", ".docx", ".html", ".htm")


class ImportError_(ValueError):
    """A file that cannot be imported; the message names the file."""


def datasets_dir() -> Path:
    return Path(os.environ.get("RAGWB_DATASETS", REPO_ROOT / "datasets"))


def slug(text: str) -> str:
    s = re.sub(r"[^\w.-]+", "_", text.strip(), flags=re.UNICODE).strip("_")
    return s or "doc"


def detect_language(text: str) -> str:
    """Script-based guess, enough to pick a tokenizer/stemmer: el, ru, zh, ja, ko or en."""
    counts = {"el": 0, "ru": 0, "zh": 0, "ja": 0, "ko": 0, "latin": 0}
    for ch in text[:5000]:
        o = ord(ch)
        if 0x0370 <= o <= 0x03FF or 0x1F00 <= o <= 0x1FFF:
            counts["el"] += 1
        elif 0x0400 <= o <= 0x04FF:
            counts["ru"] += 1
        elif 0x3040 <= o <= 0x30FF:
            counts["ja"] += 1
        elif 0xAC00 <= o <= 0xD7AF:
            counts["ko"] += 1
        elif 0x4E00 <= o <= 0x9FFF:
            counts["zh"] += 1
        elif ch.isalpha():
            counts["latin"] += 1
    best = max(counts, key=counts.get)
    if counts[best] == 0 or best == "latin":
        return "en"
    if best == "zh" and counts["ja"]:
        return "ja"
    return best


def _open_text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8-sig")


# --------------------------------------------------------------------------- SQuAD / XQuAD

def load_squad(path: str | Path, name: str | None = None, language: str = "en") -> Dataset:
    """SQuAD 2.0 JSON (``is_impossible``) or SQuAD 1.1-style JSON such as XQuAD.

    One document per article entry, one page per paragraph; gold evidence is the
    answer spans, mapped to document offsets.
    """
    path = Path(path)
    try:
        raw = json.loads(_open_text(path))
        articles = raw["data"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ImportError_(f"{path}: not a SQuAD-style JSON file ({e})") from e
    docs, questions, skipped = [], [], []
    for ai, art in enumerate(articles):
        title = art.get("title") or f"article {ai}"
        doc_id = f"a{ai:03d}-{slug(title)}"
        paras = [p["context"] for p in art["paragraphs"]]
        text, pages = pages_from_paragraphs(doc_id, paras)
        docs.append(Document(doc_id, title.replace("_", " "), language, f"{path.name}#{ai}", text, pages))
        for pi, para in enumerate(art["paragraphs"]):
            page = pages[pi]
            for qa in para["qas"]:
                impossible = bool(qa.get("is_impossible", False))
                answers, evidence = [], []
                for a in ([] if impossible else qa.get("answers", [])):
                    s = int(a["answer_start"])
                    e = s + len(a["text"])
                    if page.text[s:e] != a["text"]:
                        skipped.append(Skipped(str(path), f"question {qa['id']}: answer span does not match its paragraph"))
                        continue
                    answers.append(a["text"])
                    evidence.append(Evidence(doc_id, page.page_id, page.start + s, page.start + e, a["text"]))
                if not impossible and not evidence:
                    skipped.append(Skipped(str(path), f"question {qa['id']}: answerable but has no usable answer"))
                    continue
                if impossible:
                    evidence = [Evidence(doc_id, page.page_id)]  # the paragraph it was written against
                questions.append(Question(qa["id"], qa["question"], list(dict.fromkeys(answers)), not impossible,
                                          "unanswerable" if impossible else "extractive", language, evidence))
    return Dataset(name or path.name.split(".")[0], docs, questions, skipped)


# --------------------------------------------------------------------------- PDFs and other files

def read_pdf_pages(path: Path) -> list[str]:
    """Text of each PDF page (pypdf). Raises ImportError_ naming the file on any failure."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            try:
                ok = reader.decrypt("")
            except Exception:
                ok = 0
            if not ok:
                raise ImportError_(f"{path}: encrypted PDF (a password is required)")
        pages = [(p.extract_text() or "") for p in reader.pages]
    except ImportError_:
        raise
    except (PdfReadError, Exception) as e:  # pypdf raises many types on broken files
        raise ImportError_(f"{path}: corrupt or unreadable PDF ({type(e).__name__}: {e})") from e
    pages = [unicodedata.normalize("NFC", p).replace("\x00", "").strip() for p in pages]
    if not any(pages):
        raise ImportError_(f"{path}: PDF has no extractable text (scanned images?)")
    return pages


def _read_plain_text(path: Path) -> str:
    data = path.read_bytes()
    if not data.strip():
        raise ImportError_(f"{path}: empty file")
    if b"\x00" in data[:8192]:
        raise ImportError_(f"{path}: binary content (NUL bytes) in a text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ImportError_(
            f"{path}: not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); re-save the file as UTF-8"
        ) from e
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n"))


def _markitdown(path: Path) -> str:
    from markitdown import MarkItDown

    if path.stat().st_size == 0:
        raise ImportError_(f"{path}: empty file")
    if path.suffix.lower() == ".docx":
        import zipfile

        # markitdown falls back to plain text on a non-zip, so check the container first
        if not zipfile.is_zipfile(path):
            raise ImportError_(f"{path}: broken DOCX (not a ZIP container)")
        with zipfile.ZipFile(path) as z:
            if "word/document.xml" not in z.namelist():
                raise ImportError_(f"{path}: broken DOCX (no word/document.xml)")
    try:
        text = MarkItDown(enable_plugins=False).convert(str(path)).text_content
    except Exception as e:
        kind = "DOCX" if path.suffix.lower() == ".docx" else path.suffix.upper().lstrip(".")
        raise ImportError_(f"{path}: broken or unreadable {kind} ({type(e).__name__}: {str(e)[:200]})") from e
    text = unicodedata.normalize("NFC", (text or "").replace("\r\n", "\n")).strip()
    if not text:
        raise ImportError_(f"{path}: no text after conversion")
    return text


_HEADER = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def markdown_pages(doc_id: str, text: str) -> list[Page]:
    """One page per Markdown section (a header line and the text up to the next header)."""
    starts = [m.start() for m in _HEADER.finditer(text)]
    if not starts or starts[0] != 0:
        starts = [0] + starts
    bounds = starts + [len(text)]
    pages = []
    for s, e in zip(bounds, bounds[1:]):
        seg = text[s:e]
        st = s + (len(seg) - len(seg.lstrip()))
        en = s + len(seg.rstrip())
        if en > st:
            pages.append(Page(f"{doc_id}#p{len(pages)}", doc_id, len(pages), st, en, text[st:en]))
    return pages


def paragraph_pages(doc_id: str, text: str) -> list[Page]:
    pages = []
    for m in re.finditer(r"\S(?:.*?\S)?(?=\n[ \t]*\n|\s*\Z)", text, re.S):
        pages.append(Page(f"{doc_id}#p{len(pages)}", doc_id, len(pages), m.start(), m.end(), m.group()))
    return pages


def load_file(path: Path, doc_id: str, language: str | None = None) -> Document:
    """One file into a Document with pages. Raises ImportError_ naming the file."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ImportError_(f"{path}: unsupported file type {suffix!r} (supported: {', '.join(SUPPORTED_SUFFIXES)})")
    if suffix == ".pdf":
        if path.stat().st_size == 0:
            raise ImportError_(f"{path}: empty file")
        text, pages = pages_from_paragraphs(doc_id, read_pdf_pages(path))
        pages = [p for p in pages if p.text]
        is_md = False
    elif suffix in (".md", ".markdown"):
        text = _read_plain_text(path)
        pages, is_md = markdown_pages(doc_id, text), True
    elif suffix == ".txt":
        text = _read_plain_text(path)
        pages, is_md = paragraph_pages(doc_id, text), False
    else:  # .docx, .html: markitdown turns them into Markdown
        text = _markitdown(path)
        pages, is_md = markdown_pages(doc_id, text), True
    if not pages:
        raise ImportError_(f"{path}: no text")
    title = path.stem
    if is_md:
        m = _HEADER.search(text)
        if m:
            title = m.group(2)
    return Document(doc_id, title, language or detect_language(text), str(path), text, [p for p in pages], is_md)


# --------------------------------------------------------------------------- Docugami

def load_docugami(csv_path: str | Path, docs_dir: str | Path, name: str = "docugami") -> Dataset:
    """Docugami KG-RAG CSV (Question, Source Docs glob, Question Type, ..., Answer) plus PDFs.

    Evidence is document-level: every PDF whose file name matches the question's glob.
    """
    csv_path, docs_dir = Path(csv_path), Path(docs_dir)
    docs, skipped = [], []
    for pdf in sorted(docs_dir.glob("*.pdf")):
        try:
            docs.append(load_file(pdf, slug(pdf.stem), "en"))
        except ImportError_ as e:
            skipped.append(Skipped(str(pdf), str(e).split(": ", 1)[-1]))
    by_name = {Path(d.source_path).name: d.doc_id for d in docs}
    questions = []
    with open(csv_path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        need = {"Question", "Source Docs", "Answer"}
        if not need <= set(reader.fieldnames or []):
            raise ImportError_(f"{csv_path}: missing columns {sorted(need - set(reader.fieldnames or []))}")
        for i, row in enumerate(reader):
            line = reader.line_num
            pattern = (row.get("Source Docs") or "").strip()
            matched = [doc_id for fname, doc_id in by_name.items() if fnmatch.fnmatch(fname, pattern)]
            if not matched:
                skipped.append(Skipped(str(csv_path), f"source glob {pattern!r} matches no loaded document", line))
                continue
            questions.append(Question(
                f"docugami-{i:03d}", row["Question"].strip(), [row["Answer"].strip()], True,
                (row.get("Question Type") or "").strip(), "en", [Evidence(d) for d in matched]))
    return Dataset(name, docs, questions, skipped)


# --------------------------------------------------------------------------- user folder + JSONL

def load_folder(folder: str | Path, questions_path: str | Path | None = None, name: str | None = None) -> Dataset:
    """A folder of documents (recursively) plus an optional JSONL question file.

    Document ids are the paths relative to the folder (``guide.md``, ``sub/notes.txt``).
    See docs/datasets.md for the JSONL schema.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ImportError_(f"{folder}: not a folder")
    docs, skipped = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            if questions_path is None or path.resolve() != Path(questions_path).resolve():
                skipped.append(Skipped(str(path), f"unsupported file type {path.suffix!r}"))
            continue
        try:
            docs.append(load_file(path, path.relative_to(folder).as_posix()))
        except ImportError_ as e:
            skipped.append(Skipped(str(path), str(e).split(": ", 1)[-1]))
        except Exception as e:  # never let one file stop the corpus
            skipped.append(Skipped(str(path), f"{type(e).__name__}: {e}"))
    questions = []
    if questions_path is not None:
        questions, bad = load_questions_jsonl(questions_path, docs)
        skipped.extend(bad)
    return Dataset(name or folder.name, docs, questions, skipped)


def load_questions_jsonl(path: str | Path, docs: list[Document]) -> tuple[list[Question], list[Skipped]]:
    path = Path(path)
    by_id = {d.doc_id: d for d in docs}
    questions, skipped, seen = [], [], set()
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8-sig"))
            except (UnicodeDecodeError, ValueError) as e:
                skipped.append(Skipped(str(path), f"not valid JSON ({e})", line_no))
                continue
            try:
                q = _question_from_record(rec, by_id)
            except (KeyError, TypeError, ValueError) as e:
                msg = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                skipped.append(Skipped(str(path), msg, line_no))
                continue
            if q.qid in seen:
                skipped.append(Skipped(str(path), f"duplicate question id {q.qid!r}", line_no))
                continue
            seen.add(q.qid)
            questions.append(q)
    return questions, skipped


def _question_from_record(rec: dict, by_id: dict[str, Document]) -> Question:
    if not isinstance(rec, dict):
        raise TypeError("a question line must be a JSON object")
    qid, text = str(rec["id"]), rec["question"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("field 'question' must be a non-empty string")
    answers = rec.get("answers", [])
    if isinstance(answers, str):
        answers = [answers]
    answerable = bool(rec.get("answerable", bool(answers)))
    evidence = []
    for ev in rec.get("evidence", []):
        doc_id = ev["doc"]
        doc = by_id.get(doc_id)
        if doc is None:
            raise ValueError(f"evidence points at unknown document {doc_id!r}")
        page = None
        if ev.get("page") is not None:
            pno = int(ev["page"])
            if not 0 <= pno < len(doc.pages):
                raise ValueError(f"evidence page {pno} out of range for {doc_id!r} ({len(doc.pages)} pages)")
            page = doc.pages[pno]
        span = ev.get("text")
        if span:
            lo, hi = (page.start, page.end) if page else (0, len(doc.text))
            at = doc.text.find(span, lo, hi)
            if at < 0:
                raise ValueError(f"evidence text not found in {doc_id!r}")
            page = page or next(p for p in doc.pages if p.start <= at < p.end)
            evidence.append(Evidence(doc_id, page.page_id, at, at + len(span), span))
        else:
            evidence.append(Evidence(doc_id, page.page_id if page else None))
    return Question(qid, text.strip(), [str(a) for a in answers], answerable, str(rec.get("type", "")),
                    str(rec.get("language") or (by_id[evidence[0].doc_id].language if evidence else "en")), evidence)


# --------------------------------------------------------------------------- bundled sets

BUNDLED = {
    "squad2": "SQuAD 2.0 dev subset (4 articles, answerable + unanswerable)",
    "xquad-en": "XQuAD English subset (parallel ids with xquad-el / xquad-ru)",
    "xquad-el": "XQuAD Greek subset",
    "xquad-ru": "XQuAD Russian subset",
    "docugami": "Docugami SEC 10-Q: 3 PDFs and their questions",
}


def load_bundled(name: str) -> Dataset:
    root = datasets_dir()
    if name == "squad2":
        return load_squad(root / "squad2" / "squad2-dev-subset.json.gz", "squad2", "en")
    if name.startswith("xquad-") and name in BUNDLED:
        lang = name.split("-", 1)[1]
        return load_squad(root / "xquad" / f"xquad.{lang}.json.gz", name, lang)
    if name == "docugami":
        return load_docugami(root / "docugami" / "qna_data.csv", root / "docugami" / "docs", "docugami")
    raise KeyError(f"unknown bundled dataset {name!r}; valid: {', '.join(BUNDLED)}")


def load_any(spec: str, questions: str | None = None) -> Dataset:
    """A bundled name, a SQuAD-style JSON file, or a folder (+ JSONL questions)."""
    if spec in BUNDLED:
        return load_bundled(spec)
    p = Path(spec)
    if p.is_dir():
        return load_folder(p, questions)
    if p.suffix in (".json", ".gz") and p.exists():
        return load_squad(p)
    raise KeyError(f"{spec!r} is neither a bundled dataset ({', '.join(BUNDLED)}) nor a folder or SQuAD JSON file")
