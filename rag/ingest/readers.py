"""Reading files into documents: PDFs (pdfium; pypdf where pdfium fails, its warnings named), plain text and its
encodings, Markdown, the
markitdown formats (.docx, .html), source code; the parse cache that keeps a re-run from parsing unchanged
files again. A bad file is a ``Skipped`` entry naming it, never the end of a load; files are only read."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import sys
import time
import unicodedata
from pathlib import Path
from .code import CODE_SUFFIXES, annotate_questions, code_language, minified_reason, shebang_language
from rag.models import Dataset, Document, Page, Question, Skipped, pages_from_paragraphs


DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt", ".pdf", ".docx", ".html", ".htm")


SUPPORTED_SUFFIXES = DOCUMENT_SUFFIXES + CODE_SUFFIXES  # source code: rag/ingest/code


class ImportError_(ValueError):
    """A file that cannot be imported; the message names the file."""


def datasets_dir() -> Path:
    """The bundled gold sets: package data found by rag/ingest/bundled.py (a wheel and a checkout alike)."""
    from rag.ingest.bundled import datasets_root

    return datasets_root()


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


def open_text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8-sig")


PDF_PARSERS = ("pdfium", "pypdf")  # RAGWB_PDF_PARSER; pdfium first: 16x faster on filings, reads what pypdf refuses


def pdf_parser() -> str:
    """The PDF parser asked for (``RAGWB_PDF_PARSER``, default pdfium); an unknown name is an error naming both."""
    name = os.environ.get("RAGWB_PDF_PARSER", "").strip().lower() or "pdfium"
    if name not in PDF_PARSERS:
        raise ValueError(f"RAGWB_PDF_PARSER={name!r} is not a PDF parser (valid: {', '.join(PDF_PARSERS)})")
    return name


def read_pdf_pages(path: Path) -> list[str]:
    """Text of each PDF page. pdfium (pypdfium2) reads it; a file pdfium cannot open (other than for a password)
    is tried with pypdf, which repairs some damage, before it is called corrupt. ``RAGWB_PDF_PARSER=pypdf``: pypdf
    alone. Raises ImportError_ naming the file on any failure."""
    if pdf_parser() == "pdfium":
        try:
            pages = _read_pdfium_pages(path)
        except _PdfiumFailed as first:
            try:
                with _NamedPdfWarnings(path):
                    pages = _read_pdf_pages(path)
            except ImportError_ as e:
                raise ImportError_(f"{path}: corrupt or unreadable PDF (pdfium: {first}; pypdf: "
                                   f"{str(e).split(': ', 1)[-1]})") from e
    else:
        with _NamedPdfWarnings(path):
            pages = _read_pdf_pages(path)
    return _clean_pages(path, pages)


class _PdfiumFailed(Exception):
    pass


def _read_pdfium_pages(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            raise ImportError_(f"{path}: encrypted PDF (a password is required)") from e
        raise _PdfiumFailed(str(e).replace("Failed to load document ", "").strip("()."))
    try:
        pages = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            # pdfium ends a line with CR LF and marks a word hyphenated at a line end with U+FFFE: both become what
            # pypdf gives ("inter-\nnational"), which evidence matching folds (docs/datasets.md)
            pages.append(textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n").replace("\ufffe", "-\n"))
            textpage.close()
            page.close()
        return pages
    except pdfium.PdfiumError as e:
        raise _PdfiumFailed(str(e)) from e
    finally:
        doc.close()


def _clean_pages(path: Path, pages: list[str]) -> list[str]:
    pages = [unicodedata.normalize("NFC", p).replace("\x00", "").strip() for p in pages]
    if not any(pages):
        raise ImportError_(f"{path}: PDF has no extractable text (scanned images?)")
    return pages


class _NamedPdfWarnings:
    """pypdf's own warnings ("EOF marker not found", "Ignoring wrong pointing object") name no file:
    while one PDF is read they are printed with its path in front."""

    def __init__(self, path: Path):
        import logging

        self.path, self.logger = path, logging.getLogger("pypdf")
        self.handler = logging.StreamHandler(sys.stderr)
        from rag.safeio import printable

        # the path escaped (a name from outside), and '%' doubled: the format string is the path's too
        self.handler.setFormatter(logging.Formatter(printable(str(path)).replace("%", "%%") + ": pypdf: %(message)s"))

    def __enter__(self):
        self.propagate = self.logger.propagate
        self.logger.addHandler(self.handler)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.propagate = self.propagate


def _read_pdf_pages(path: Path) -> list[str]:
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
    return pages


NUL = b"\x00"


def _read_plain_text(path: Path) -> str:
    data = path.read_bytes()
    if not data.strip():
        raise ImportError_(f"{path}: empty file")
    if NUL in data:  # anywhere, not only near the start: a NUL is never text
        raise ImportError_(f"{path}: binary content (NUL byte at offset {data.index(NUL)}) in a text file")
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


PARSER_VERSION = "2"  # 2: PDFs read by pdfium; bump when parsing changes what a file yields: old cache entries are then ignored


class ParseCache:
    """Parsed text of PDF/DOCX/HTML files keyed by the file's content hash (sha256) and the parser
    version, so an unchanged corpus is not parsed again on every run. Entries are written
    atomically (temp file + rename): a crash never leaves half an entry."""

    def __init__(self, root: str | Path | None, shipped: str | Path | None = None):
        self.root = Path(root) if root else None  # None: read the shipped layer only, write nothing
        # read-only second layer: the parsed pages of the bundled PDFs (datasets/parsed/), so a fresh
        # clone does not parse them; same keys, so a changed file or parser version misses it
        self.shipped = Path(shipped) if shipped else datasets_dir() / "parsed"
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(path: Path) -> str:
        h = hashlib.sha256(path.read_bytes()).hexdigest()
        suffix = path.suffix.lower().lstrip(".")
        # the parser asked for keys a PDF's entry: pypdf's text is not pdfium's
        parser = f"{pdf_parser()}-" if suffix == "pdf" and pdf_parser() != "pdfium" else ""
        return f"{suffix}-{PARSER_VERSION}-{parser}{h}"

    def has(self, key: str) -> bool:
        """An entry exists for the key (read by get; a damaged one misses there and is parsed again)."""
        mine = [self.root / key[-2:] / f"{key}.json.gz"] if self.root else []
        return any(p.is_file() for p in mine + [self.shipped / f"{key}.json.gz"])

    def get(self, key: str):
        mine = [self.root / key[-2:] / f"{key}.json.gz"] if self.root else []
        for p in mine + [self.shipped / f"{key}.json.gz"]:
            try:
                value = json.loads(gzip.decompress(p.read_bytes()))
            except (OSError, ValueError, EOFError):
                continue
            self.hits += 1
            return value
        self.misses += 1
        return None

    def put(self, key: str, value) -> None:
        if self.root is None:
            return
        p = self.root / key[-2:] / f"{key}.json.gz"
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
        tmp.write_bytes(gzip.compress(json.dumps(value, ensure_ascii=False).encode(), mtime=0))
        tmp.replace(p)


def _cached(cache: ParseCache | None, path: Path, parse):
    if cache is None:
        return parse()
    key = cache.key(path)
    value = cache.get(key)
    if value is None:
        value = parse()
        cache.put(key, value)
    return value


def load_file(path: Path, doc_id: str, language: str | None = None, cache: ParseCache | None = None) -> Document:
    """One file into a Document with pages. Raises ImportError_ naming the file."""
    suffix = path.suffix.lower()
    if suffix in CODE_SUFFIXES or (not suffix and shebang_language(path)):
        return load_code_file(path, doc_id, language)
    if suffix not in SUPPORTED_SUFFIXES:
        raise ImportError_(f"{path}: unsupported file type {suffix!r} (supported: {', '.join(SUPPORTED_SUFFIXES)})")
    if suffix == ".pdf":
        if path.stat().st_size == 0:
            raise ImportError_(f"{path}: empty file")
        # every physical page keeps its 0-based index, blank ones included (they get no chunks):
        # gold evidence says "page 61" meaning the page a person sees in a PDF viewer
        text, pages = pages_from_paragraphs(doc_id, _cached(cache, path, lambda: read_pdf_pages(path)))
        is_md = False
    elif suffix in (".md", ".markdown"):
        text = _read_plain_text(path)
        pages, is_md = markdown_pages(doc_id, text), True
    elif suffix == ".txt":
        text = _read_plain_text(path)
        pages, is_md = paragraph_pages(doc_id, text), False
    else:  # .docx, .html: markitdown turns them into Markdown
        text = _cached(cache, path, lambda: _markitdown(path))
        pages, is_md = markdown_pages(doc_id, text), True
    if not any(p.text for p in pages):
        raise ImportError_(f"{path}: no text")
    title = path.stem
    if is_md:
        m = _HEADER.search(text)
        if m:
            title = m.group(2)
    return Document(doc_id, title, language or detect_language(text), str(path), text, [p for p in pages], is_md)


def load_code_file(path: Path, doc_id: str, language: str | None = None, text: str | None = None) -> Document:
    """A source file: one page (the file), parsed for its definitions (rag/ingest/code). A binary or
    minified file raises ImportError_ (skipped and counted); one that does not parse keeps a
    warning (``doc.code_parse.warning``) and is chunked by line windows."""
    if text is None:
        text = _read_plain_text(path)
    reason = minified_reason(path, text)
    if reason:
        raise ImportError_(f"{path}: {reason}")
    lang = code_language(path)
    doc = Document(doc_id, path.name, language or "en", str(path), text,
                   [Page(f"{doc_id}#p0", doc_id, 0, 0, len(text), text)], False, lang)
    from .chunking import code_parse

    code_parse(doc)  # parsed once, here: a file that falls back to line windows is warned about at load
    return doc


def code_warnings(docs: list[Document]) -> list[Skipped]:
    """One warning per source file that fell back to line windows (it names the file and why)."""
    out = []
    for d in docs:
        w = getattr(d.code_parse, "warning", "") if d.code_language else ""
        if w:
            out.append(Skipped(d.source_path, w, kind="warning"))
    return out


def load_code_set(path: str | Path, name: str | None = None) -> Dataset:
    """A code-retrieval gold set built by scripts/build_code_set.py: source files (as text) and
    questions with function-span evidence."""
    obj = json.loads(open_text(Path(path)))
    docs, skipped = [], []
    for d in obj["documents"]:
        try:
            docs.append(load_code_file(Path(d["doc_id"]), d["doc_id"], "en", d["text"]))
        except ImportError_ as e:
            skipped.append(Skipped(d["doc_id"], str(e).split(": ", 1)[-1]))
    skipped.extend(code_warnings(docs))
    questions = [Question.from_dict(q) for q in obj["questions"]]
    annotate_questions(questions, docs)  # each span's definition, for the symbol metrics
    return Dataset(name or obj["name"], docs, questions, skipped)


def parse_one(path: Path, doc_id: str, language: str | None, cache: ParseCache | None
              ) -> tuple[Document | None, Skipped | None, float]:
    """(document or None, the reason it was skipped or None, seconds): never raises, so one bad file
    never stops the rest, here or in an engine's worker (rag/index/engines.py)."""
    t0 = time.perf_counter()
    doc = skip = None
    try:
        doc = load_file(path, doc_id, language, cache)
    except ImportError_ as e:
        skip = Skipped(str(path), str(e).split(": ", 1)[-1])
    except Exception as e:
        skip = Skipped(str(path), f"{type(e).__name__}: {e}")
    return doc, skip, time.perf_counter() - t0
