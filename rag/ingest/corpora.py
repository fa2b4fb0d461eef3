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
import hashlib
import json
import os
import re
import sys
import time
import unicodedata
from pathlib import Path

from .code import (CODE_SUFFIXES, all_defs, annotate_questions, code_language, def_span, line_starts, lines_span,
                   minified_reason, shebang_language)
from rag.models import Dataset, Document, Evidence, Page, Question, Skipped, pages_from_paragraphs
from .textmatch import locate
from rag.jsonsafe import loads_bounded

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt", ".pdf", ".docx", ".html", ".htm")
SUPPORTED_SUFFIXES = DOCUMENT_SUFFIXES + CODE_SUFFIXES  # source code: rag/ingest/code


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
        raw = loads_bounded(_open_text(path))
        articles = raw["data"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ImportError_(f"{path}: not a SQuAD-style JSON file ({e})") from e
    docs, questions, skipped = [], [], []
    if not isinstance(articles, list):
        raise ImportError_(f"{path}: not a SQuAD-style JSON file ('data' is {type(articles).__name__}, not a list)")
    for ai, art in enumerate(articles):
        try:  # a field of the wrong type costs its article, named, never the whole file
            title = art.get("title") or f"article {ai}"
            if not isinstance(title, str):
                raise TypeError(f"title is {type(title).__name__}, not text")
            doc_id = f"a{ai:03d}-{slug(title)}"
            paras = [p["context"] for p in art["paragraphs"]]
            if not all(isinstance(x, str) for x in paras):
                raise TypeError("a paragraph's context is not text")
            text, pages = pages_from_paragraphs(doc_id, paras)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            why = f"missing field {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
            skipped.append(Skipped(str(path), f"article {ai}: skipped ({why})"))
            continue
        docs.append(Document(doc_id, title.replace("_", " "), language, f"{path.name}#{ai}", text, pages))
        for pi, para in enumerate(art["paragraphs"]):
            page = pages[pi]
            qas = para.get("qas") or []
            if not isinstance(qas, list):
                skipped.append(Skipped(str(path), f"article {ai} paragraph {pi}: 'qas' is {type(qas).__name__}, "
                                                  "not a list (skipped)"))
                continue
            for qn, qa in enumerate(qas):
                try:
                    q = _squad_question(qa, page, doc_id, title, language, path, skipped)
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    why = f"missing field {e.args[0]!r}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
                    skipped.append(Skipped(str(path), f"article {ai} paragraph {pi} question {qn}: skipped ({why})"))
                    continue
                if q is not None:
                    questions.append(q)
    return Dataset(name or path.name.split(".")[0], docs, questions, skipped)


# --------------------------------------------------------------------------- PDFs and other files

def _squad_question(qa: dict, page, doc_id: str, title: str, language: str, path: Path, skipped: list):
    """One SQuAD question (None when its answers do not match its paragraph: skipped, said)."""
    impossible = bool(qa.get("is_impossible", False))
    if not isinstance(qa["id"], str) or not isinstance(qa["question"], str):
        raise TypeError("id and question must be text")
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
        return None
    if impossible:
        evidence = [Evidence(doc_id, page.page_id)]  # the paragraph it was written against
    return Question(qa["id"], qa["question"], list(dict.fromkeys(answers)), not impossible,
                    "unanswerable" if impossible else "extractive", language, evidence,
                    {"title": title.replace("_", " ")})


def read_pdf_pages(path: Path) -> list[str]:
    """Text of each PDF page (pypdf). Raises ImportError_ naming the file on any failure."""
    with _NamedPdfWarnings(path):
        return _read_pdf_pages(path)


class _NamedPdfWarnings:
    """pypdf's own warnings ("EOF marker not found", "Ignoring wrong pointing object") name no file:
    while one PDF is read they are printed with its path in front."""

    def __init__(self, path: Path):
        import logging

        self.path, self.logger = path, logging.getLogger("pypdf")
        self.handler = logging.StreamHandler(sys.stderr)
        self.handler.setFormatter(logging.Formatter(f"{path}: pypdf: %(message)s"))

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
    pages = [unicodedata.normalize("NFC", p).replace("\x00", "").strip() for p in pages]
    if not any(pages):
        raise ImportError_(f"{path}: PDF has no extractable text (scanned images?)")
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


PARSER_VERSION = "1"  # bump when parsing changes what a file yields: old cache entries are then ignored


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
        return f"{path.suffix.lower().lstrip('.')}-{PARSER_VERSION}-{h}"

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
    obj = json.loads(_open_text(Path(path)))
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


# --------------------------------------------------------------------------- Docugami

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


def _parse_files(files: list[tuple[Path, str]], language: str | None, cache: ParseCache | None,
                 progress: bool, desc: str, engine=None) -> tuple[list[Document], list[Skipped], dict]:
    """Parse files into documents, one bad file never stopping the rest; per-file seconds.
    ``engine`` (rag/index/engines.py) parses them elsewhere, e.g. in Ray tasks."""
    if engine is not None and engine.name != "local" and files:
        return engine.parse_files(files, language, cache)
    docs, skipped, seconds = [], [], {}
    bar = None
    if progress and len(files) > 1:
        from tqdm import tqdm
        bar = tqdm(total=len(files), desc=desc, unit="file", file=sys.stderr, leave=False, dynamic_ncols=True)
    for path, doc_id in files:
        doc, skip, seconds[str(path)] = parse_one(path, doc_id, language, cache)
        if doc is not None:
            docs.append(doc)
        else:
            skipped.append(skip)
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    return docs, skipped, seconds


def load_docugami(csv_path: str | Path, docs_dir: str | Path, name: str = "docugami",
                  parse_cache: ParseCache | None = None, progress: bool = False, engine=None) -> Dataset:
    """Docugami KG-RAG CSV (Question, Source Docs glob, Question Type, ..., Answer) plus PDFs.

    Evidence is document-level: every PDF whose file name matches the question's glob.
    """
    csv_path, docs_dir = Path(csv_path), Path(docs_dir)
    docs, skipped, seconds = _parse_files([(pdf, slug(pdf.stem)) for pdf in sorted(docs_dir.glob("*.pdf"))], "en",
                                          parse_cache, progress, f"parsing {name}", engine)
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
                (row.get("Question Type") or "").strip(), "en", [Evidence(d) for d in matched],
                {"source_docs": pattern, "chunk_type": (row.get("Source Chunk Type") or "").strip(),
                 "company": _ticker(pattern)}))
    return Dataset(name, docs, questions, skipped, parse_seconds=seconds)


def _ticker(pattern: str) -> str:
    """'*2023 Q1 AAPL*' -> 'AAPL' (the company of a Docugami question; '' when the glob names several)."""
    found = set(re.findall(r"\b([A-Z]{2,5})\b", pattern))
    return found.pop() if len(found) == 1 else ""


# --------------------------------------------------------------------------- user folder + JSONL

# folders no one means as a corpus: version control, caches, virtual environments, installed packages.
# Each is skipped as one entry (named, with why), not walked: a repository's .git alone is thousands of files.
SKIPPED_FOLDERS = {".git": "version control", ".hg": "version control", ".svn": "version control",
                   "__pycache__": "compiled Python cache", ".mypy_cache": "tool cache", ".pytest_cache": "tool cache",
                   ".ruff_cache": "tool cache", ".tox": "tool cache", "node_modules": "installed packages",
                   ".venv": "virtual environment", "venv": "virtual environment", ".idea": "editor settings",
                   ".vscode": "editor settings"}


def _skipped_folder(name: str) -> str | None:
    if name in SKIPPED_FOLDERS:
        return SKIPPED_FOLDERS[name]
    if name.endswith(".egg-info") or name.endswith(".dist-info"):
        return "package metadata"
    return None


def _utf8_name(name: str) -> bool:
    """Whether a name from the file system is valid UTF-8 (undecodable bytes arrive as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown_path(path: Path) -> str:
    """A path with undecodable bytes shown as \\xNN escapes: printable, storable, still recognisable."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


GITIGNORE_MAX_BYTES = 1 << 20


MAX_PATTERN_STARS = 16  # without re2 (fallback only): a gitignore line with more '*' is skipped, said
MAX_PATTERN_CHARS = 1000


def _re2() -> bool:
    try:
        import re2  # noqa: F401  (google-re2: a linear-time automaton, no backtracking)
        return True
    except ImportError:
        return False


def pattern_spec(lines: list[str]):
    """A compiled set of gitignore lines matched by RE2 (google-re2, a dependency): linear in the path whatever the
    pattern holds (16 `*a` segments then `b` against 60 `a`s backtracked for minutes in Python's `re`; the star cap
    was no defence). Without re2 installed, pathspec's own backend and the star cap below."""
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2" if _re2() else "simple")


def _collapse_stars(line: str) -> str:
    """Runs of '*' as git reads them: '**' only where a whole path segment is stars (``a/**/b``), any other run
    is one '*'. pathspec compiles each '*' to its own ``[^/]*``, so 200 stars in a row backtracked for minutes."""
    def one(m: re.Match) -> str:
        s, e = m.start(), m.end()
        whole = (s == 0 or line[s - 1] == "/") and (e == len(line) or line[e] == "/")
        return "**" if whole and e - s >= 2 else "*"
    return re.sub(r"\*{2,}", one, line)


def gitignore_lines(lines: list[str], where: str) -> tuple[list[str], list[Skipped]]:
    """The lines of a .gitignore that are safe to match, and a warning for each one left out (naming the file
    and line): a pattern git would skip (a lone backslash), or one too long or with too many stars to match in
    bounded time. Matching then stays linear in the path, whatever the file holds."""
    out, warns = [], []
    for i, raw in enumerate(lines, start=1):
        line = _collapse_stars(raw)
        why = ""
        if len(line) > MAX_PATTERN_CHARS:
            why = f"longer than {MAX_PATTERN_CHARS:,} characters"
        elif line.count("*") > MAX_PATTERN_STARS and not _re2():
            why = f"more than {MAX_PATTERN_STARS} '*' wildcards (matching it could take minutes without re2)"
        else:
            try:
                pattern_spec([line])
            except Exception as e:  # noqa: BLE001 - pathspec's own error types vary by version
                why = f"not a pattern git reads ({str(e)[:80]})"
        if why:
            warns.append(Skipped(where, f"line {i} skipped: {why}; the other lines apply", i, "warning"))
            continue
        out.append(line)
    return out, warns


def _user_patterns(patterns: tuple, flag: str) -> list[str]:
    """--include/--exclude patterns: the same bounds as a .gitignore line, but a bad one is an error (the user
    asked for it by name), never skipped."""
    lines, warns = gitignore_lines(list(patterns), flag)
    if warns:
        bad = patterns[warns[0].line - 1]
        raise ValueError(f"{flag} {bad[:80]!r}: {warns[0].reason.split(': ', 1)[1].split(';')[0]}")
    return lines


class _Ignored:
    """What `.gitignore` files (each applying below its own folder, as git reads them) and the user's
    --include/--exclude patterns (gitignore syntax, relative to the corpus folder) leave out; counted."""

    def __init__(self, root: Path, include: tuple = (), exclude: tuple = (), gitignore: bool = True):
        self.root, self.gitignore = root, gitignore
        self.include = pattern_spec(_user_patterns(include, "--include")) if include else None
        self.exclude = pattern_spec(_user_patterns(exclude, "--exclude")) if exclude else None
        # each --exclude rule on its own, to count what each left out (one line per rule in the summary)
        self.exclude_rules = [(x, pattern_spec([x])) for x in _user_patterns(exclude, "--exclude")]
        self.specs: list[tuple[Path, object]] = []  # (folder, its .gitignore)
        self.by_gitignore = self.by_pattern = 0
        self.by_rule: dict[str, int] = {}
        self.unread: list[Skipped] = []  # .gitignore files that could not be read (said, never silently ignored)

    def enter(self, d: Path) -> None:
        g = d / ".gitignore"
        if self.gitignore and g.is_file():
            try:
                if g.stat().st_size > GITIGNORE_MAX_BYTES:  # a corpus file like any other: capped
                    raise OSError(f"larger than {GITIGNORE_MAX_BYTES:,} bytes")
                lines = g.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError as e:
                self.unread.append(Skipped(str(g), f"not read ({e}): its patterns leave nothing out", kind="warning"))
                return
            lines, warns = gitignore_lines(lines, str(g))
            self.unread.extend(warns)
            self.specs.append((d, pattern_spec(lines)))

    def _git(self, path: Path, is_dir: bool) -> bool:
        for base, spec in self.specs:
            if path.is_relative_to(base) and path != base:
                rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
                if spec.match_file(rel):
                    return True
        return False

    def ignored(self, path: Path, is_dir: bool = False) -> bool:
        """Whether a file or folder is left out (counted): a folder by .gitignore or --exclude (pruned whole), a
        file by those or by not matching --include."""
        rel = path.relative_to(self.root).as_posix() + ("/" if is_dir else "")
        if self._git(path, is_dir):
            self.by_gitignore += 1
            return True
        if self.exclude is not None and self.exclude.match_file(rel):
            rule = next((f"--exclude {x}" for x, sp in self.exclude_rules if sp.match_file(rel)), "--exclude")
        elif not is_dir and self.include is not None and not self.include.match_file(rel):
            rule = "--include (matched no pattern)"
        else:
            return False
        self.by_pattern += 1
        self.by_rule[rule] = self.by_rule.get(rule, 0) + 1
        return True

    def summary(self, folder: Path) -> list[Skipped]:
        out = list(self.unread)
        if self.by_gitignore:
            out.append(Skipped(str(folder), f"{self.by_gitignore} files or folders left out by .gitignore "
                                            "(--no-gitignore reads them)"))
        for rule, n in sorted(self.by_rule.items()):  # one line per rule, as docs/datasets.md promises
            out.append(Skipped(str(folder), f"{n} files or folders left out by {rule}"))
        return out


def list_folder(folder: Path, follow_symlinks: bool = False, include: tuple = (), exclude: tuple = (),
                gitignore: bool = True, never: tuple = ()) -> tuple[list[Path], list[Skipped]]:
    """Files under ``folder``, in a stable order. Symbolic links are skipped with a reason unless
    ``follow_symlinks`` (a hostile corpus could link /etc into prompts and reports); loops, broken
    links and folders named like documents (``x.pdf/``) are reported. `.gitignore` files are honoured
    (``gitignore=False``: not), ``include``/``exclude`` are gitignore-style patterns; ``never``: folders never
    read (the workspace, when it lives inside the corpus: its indexes, caches and reports)."""
    root = folder.resolve()
    files, skipped = [], []
    seen_dirs = set()
    ignored = _Ignored(folder, tuple(include), tuple(exclude), gitignore)
    never_ids = set()
    for n in never:
        try:
            st = Path(n).stat()
            never_ids.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=follow_symlinks):
        d = Path(dirpath)
        st = d.stat()
        if (st.st_dev, st.st_ino) in seen_dirs:
            skipped.append(Skipped(str(d), "symbolic link loop (folder already visited)"))
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        ignored.enter(d)
        keep = []
        for name in sorted(dirnames):
            sub = d / name
            try:
                sst = sub.stat()
                if (sst.st_dev, sst.st_ino) in never_ids:
                    skipped.append(Skipped(str(sub), "folder skipped (the workspace: its indexes, caches and "
                                                     "reports are never ingested)"))
                    continue
            except OSError:
                pass
            if _utf8_name(name) and ignored.ignored(sub, is_dir=True):
                continue
            if not _utf8_name(name):
                skipped.append(Skipped(_shown_path(sub), "folder name is not valid UTF-8 (skipped with its files; "
                                                         "rename it to include them)"))
                continue
            why = _skipped_folder(name)
            if why:
                skipped.append(Skipped(str(sub), f"folder skipped ({why})"))
                continue
            if sub.is_symlink() and not follow_symlinks:
                skipped.append(Skipped(str(sub), f"symbolic link to {os.path.realpath(sub)} skipped "
                                                 "(pass --follow-symlinks to include linked folders)"))
                continue
            if sub.suffix.lower() in SUPPORTED_SUFFIXES:
                skipped.append(Skipped(str(sub), "a folder named like a document (its files are still read)"))
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            f = d / name
            if not _utf8_name(name):  # its id would not survive the store, the index or a report
                skipped.append(Skipped(_shown_path(f), "file name is not valid UTF-8 (rename it to include it)"))
                continue
            if name == ".gitignore" or ignored.ignored(f):
                continue
            if f.is_symlink():
                target = Path(os.path.realpath(f))
                if not target.exists():
                    skipped.append(Skipped(str(f), f"broken symbolic link (to {target})"))
                    continue
                if not follow_symlinks:
                    where = "inside" if target.is_relative_to(root) else "outside"
                    skipped.append(Skipped(str(f), f"symbolic link to {target} ({where} the folder) skipped "
                                                   "(pass --follow-symlinks to include it)"))
                    continue
            if not f.is_file():
                skipped.append(Skipped(str(f), "not a regular file"))
                continue
            files.append(f)
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix()), skipped + ignored.summary(folder)


def load_folder(folder: str | Path, questions_path: str | Path | None = None, name: str | None = None,
                parse_cache: ParseCache | None = None, progress: bool = False,
                follow_symlinks: bool = False, engine=None, previous=None, include: tuple = (),
                exclude: tuple = (), gitignore: bool = True, never: tuple = ()) -> Dataset:
    """A folder of documents (recursively) plus an optional JSONL question file.

    Document ids are the paths relative to the folder (``guide.md``, ``sub/notes.txt``).
    See docs/datasets.md for the JSONL schema. ``previous(doc_id)``: the last good version of a
    document already ingested (or None); a file that cannot be read now keeps that version, said
    aloud, instead of losing its rows and gold questions.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ImportError_(f"{folder}: not a folder")
    paths, skipped = list_folder(folder, follow_symlinks, include, exclude, gitignore, never)
    todo = []
    by_type: dict[str, list[str]] = {}  # unsupported files, one summary line (36 lines for .json/.gz/.toml read as noise)
    for path in paths:
        if path.suffix.lower() not in SUPPORTED_SUFFIXES and not (not path.suffix and shebang_language(path)):
            if questions_path is None or path.resolve() != Path(questions_path).resolve():
                by_type.setdefault(path.suffix.lower() or "(no extension)", []).append(
                    path.relative_to(folder).as_posix())
            continue
        todo.append((path, path.relative_to(folder).as_posix()))
    if by_type:
        kinds = sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        n = sum(len(v) for v in by_type.values())
        skipped.append(Skipped(str(folder), f"{n} files of unsupported types skipped: " + ", ".join(
            f"{k} {len(v)} (e.g. {v[0]})" for k, v in kinds)))
    docs, bad, seconds = _parse_files(todo, None, parse_cache, progress, f"parsing {folder.name}",
                                      engine)
    if previous is not None and bad:
        docs, bad = _keep_last_good(todo, docs, bad, previous)
    skipped.extend(bad)
    skipped.extend(code_warnings(docs))
    questions = []
    if questions_path is not None:
        from .conversations import is_conversation_file, load_conversations_jsonl

        qp = Path(questions_path)
        if qp.is_file() and is_conversation_file(qp):  # one conversation a line (docs/conversations.md)
            questions, bad = load_conversations_jsonl(qp, docs)
        else:
            questions, bad = load_questions_jsonl(questions_path, docs)
        skipped.extend(bad)
        annotate_questions(questions, docs)
    return Dataset(name or folder.name, docs, questions, skipped, parse_seconds=seconds)


def _keep_last_good(todo, docs, bad, previous):
    """An unreadable new version of an ingested file (corrupt, emptied, caught mid-save) keeps the
    version ingested before: its rows and its gold questions stay; the skip becomes a warning naming it."""
    doc_of = {str(path): doc_id for path, doc_id in todo}
    order = {doc_id: i for i, (_, doc_id) in enumerate(todo)}
    still_bad = []
    for sk in bad:
        old = previous(doc_of[sk.path]) if sk.path in doc_of else None
        if old is None:
            still_bad.append(sk)
            continue
        docs.append(old)
        still_bad.append(Skipped(sk.path, f"{sk.reason}; kept the last good version ingested before "
                                          "(its rows and gold questions stay)", kind="warning"))
    docs.sort(key=lambda d: order.get(d.doc_id, len(order)))
    return docs, still_bad


def load_questions_jsonl(path: str | Path, docs: list[Document]) -> tuple[list[Question], list[Skipped]]:
    """Questions from a JSONL file. A bad line is skipped naming file, line and field; an evidence
    item that cannot be placed exactly is downgraded (normalised/fuzzy text, page, document) with a
    warning, never dropping the question (docs/datasets.md)."""
    path = Path(path)
    if path.is_dir():
        raise ImportError_(f"{path}: is a folder; --questions expects a JSONL file")
    if not path.is_file():
        raise ImportError_(f"{path}: questions file not found")
    by_id = {d.doc_id: d for d in docs}
    from .conversations import decode_lines

    questions, skipped, seen = [], [], set()
    text_lines: dict[str, int] = {}  # a derived id's question text -> the line that had it first
    for line_no, line, why in decode_lines(path.read_bytes()):
        if line is None:
            skipped.append(Skipped(str(path), why, line_no))
            continue
        try:
            rec = loads_bounded(line)
        except ValueError as e:
            skipped.append(Skipped(str(path), f"not valid JSON ({e})", line_no))
            continue
        warnings: list[str] = []
        try:
            q = _question_from_record(rec, by_id, warnings)
        except (KeyError, TypeError, ValueError) as e:
            msg = f"missing field {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
            skipped.append(Skipped(str(path), msg, line_no))
            continue
        skipped.extend(Skipped(str(path), w, line_no, "warning") for w in warnings)
        if isinstance(rec, dict) and rec.get("id") is None:  # the id was derived from the text: same text, same id
            first = text_lines.setdefault(q.qid, line_no)
            if first != line_no:
                skipped.append(Skipped(str(path), f"the same question text as line {first} and neither line has an "
                                                  f"'id' (give each line an id to keep both): {q.text[:80]!r}",
                                       line_no))
                continue
        if q.qid in seen:
            skipped.append(Skipped(str(path), f"duplicate question id {q.qid!r}", line_no))
            continue
        seen.add(q.qid)
        questions.append(q)
    return questions, skipped


QUESTION_FIELDS = ("id", "question", "answers", "answerable", "type", "language", "evidence", "metadata")


def _field(rec: dict, name: str, types: tuple, what: str, default=None, required: bool = False):
    """A typed field; a wrong type is an error naming the field (``"false"`` is not ``false``)."""
    v = rec.get(name)
    if v is None and not required:
        return default
    if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
        raise TypeError(f"field {name!r} must be {what}, got {json.dumps(v)[:60]}")
    return v


MAX_QUESTION_CHARS = 10_000  # a longer "question" is a pasted document, not a question: its line is skipped, named


def _not_text(obj, where: str = "") -> str | None:
    """The first field holding a lone surrogate (a JSON escape like \\ud800 that is no character and cannot be
    stored as UTF-8), or None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the line"
        return None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        name = f"{where}[{k}]" if isinstance(k, int) else f"{where}.{k}" if where else str(k)
        bad = (name if isinstance(k, str) and _not_text(k) else None) or _not_text(v, name)
        if bad:
            return bad
    return None


def _question_from_record(rec: dict, by_id: dict[str, Document], warnings: list[str] | None = None) -> Question:
    if not isinstance(rec, dict):
        raise TypeError("a question line must be a JSON object")
    warnings = [] if warnings is None else warnings
    bad = _not_text(rec)
    if bad:  # checked first: with an id, such a line passed here and failed the whole ingest when stored
        raise ValueError(f"field '{bad}' holds a lone surrogate (an escape like \\ud800 that is no character): "
                         "not storable text")
    if "question" not in rec:
        raise KeyError("question")
    text = rec["question"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("field 'question' must be a non-empty string")
    if len(text) > MAX_QUESTION_CHARS:
        raise ValueError(f"field 'question' is {len(text):,} characters, over the {MAX_QUESTION_CHARS:,} a question "
                         "may have (a document pasted as a question?)")
    if rec.get("id") is None:  # optional: a stable id from the question's own text (docs/datasets.md)
        qid = derived_question_id(text)
    else:
        qid = _field(rec, "id", (str, int), "a string or an integer", required=True)
        if isinstance(qid, str) and not qid.strip():
            raise ValueError("field 'id' must not be empty")
    answers = _field(rec, "answers", (list, str), "a list of strings", None)
    if isinstance(answers, str):
        answers = [answers]
    if answers is not None and not all(isinstance(a, str) for a in answers):
        raise TypeError("field 'answers' must be a list of strings")
    answerable = _field(rec, "answerable", (bool,), "true or false", None)
    if answerable is None:
        # a missing 'answers' is unknown, not "unanswerable": nobody wrote an answer (answer and abstention
        # metrics are not_applicable, evidence metrics still apply); "answers": [] says there is none
        answerable = None if answers is None else bool(answers)
    answers = answers or []
    qtype = _field(rec, "type", (str,), "a string", "")
    language = _field(rec, "language", (str,), "a string", None)
    evs = _field(rec, "evidence", (list,), "a list of objects", [])
    meta = dict(_field(rec, "metadata", (dict,), "an object", {}) or {})
    meta.update({k: v for k, v in rec.items() if k not in QUESTION_FIELDS})  # extra fields are metadata
    evidence, unknown = [], []
    for k, ev in enumerate(evs):
        where = f"evidence[{k}]"
        if not isinstance(ev, dict):
            raise TypeError(f"field '{where}' must be an object like {{\"doc\": ..., \"page\": 0}}")
        extra = sorted(set(ev) - EVIDENCE_KEYS)
        if extra:  # a key we do not read would be dropped without a word: an error naming it
            raise ValueError(f"field '{where}' has unknown key(s) {', '.join(map(repr, extra))}; valid: "
                             f"{', '.join(sorted(EVIDENCE_KEYS))}")
        doc_id = ev.get("doc")
        if not isinstance(doc_id, str) or not doc_id:
            raise TypeError(f"field '{where}.doc' must be a document id (string)")
        doc = by_id.get(doc_id)
        if doc is None:
            unknown.append(doc_id)
            warnings.append(f"{where} points at unknown document {doc_id!r}; item ignored")
            continue
        page = None
        if ev.get("page") is not None:
            pno = ev["page"]
            if isinstance(pno, bool) or not isinstance(pno, int):
                raise TypeError(f"field '{where}.page' must be an integer (0-based page), got {json.dumps(pno)}")
            if not 0 <= pno < len(doc.pages):
                warnings.append(f"{where}: page {pno} out of range for {doc_id!r} ({len(doc.pages)} pages); "
                                "kept as document-level evidence")
            else:
                page = doc.pages[pno]
        sym = ev.get("symbol")
        if sym is not None:  # source code: a qualified definition name (Class.method, ns.Name, Type.Method)
            if not isinstance(sym, str) or not sym.strip():
                raise TypeError(f"field '{where}.symbol' must be a qualified name like \"Command.get_help\"")
            found = find_symbol(doc, sym.strip())
            if found is None:
                warnings.append(f"{where}: symbol {sym!r} is not a definition of {doc_id!r} as the index names them; "
                                "kept as document-level evidence")
                evidence.append(Evidence(doc_id, None))
                continue
            s0, e0 = found
            at_page = _page_at(doc, s0)
            evidence.append(Evidence(doc_id, at_page.page_id if at_page else None, s0, e0, doc.text[s0:e0],
                                     sym.strip(), s0, e0))
            continue
        lines = ev.get("lines")
        if lines is not None:  # source code: [first, last] 1-based lines, the usual way to point at code
            if (not isinstance(lines, list) or len(lines) != 2 or any(isinstance(x, bool) or not isinstance(x, int)
                                                                      for x in lines)):
                raise TypeError(f"field '{where}.lines' must be [first, last] (1-based line numbers), got "
                                f"{json.dumps(lines)}")
            starts = line_starts(doc.text)
            if not 1 <= lines[0] <= lines[1] <= len(starts):
                warnings.append(f"{where}: lines {lines} out of range for {doc_id!r} ({len(starts)} lines); "
                                "kept as document-level evidence")
            else:
                s0, e0 = lines_span(doc.text, lines[0] - 1, lines[1] - 1)
                at_page = _page_at(doc, s0)
                evidence.append(Evidence(doc_id, at_page.page_id if at_page else None, s0, e0, doc.text[s0:e0]))
                continue
        span = ev.get("text")
        if span is not None and not isinstance(span, str):
            raise TypeError(f"field '{where}.text' must be a string")
        if span and span.strip():
            lo, hi = (page.start, page.end) if page else (0, len(doc.text))
            m = locate(span, doc.text, lo, hi)
            if m is not None:
                if m.method != "exact":
                    warnings.append(f"{where}: evidence text matched {m.method}"
                                    f"{f' (ratio {m.ratio:.2f})' if m.method == 'fuzzy' else ''} in {doc_id!r}")
                at_page = page or _page_at(doc, m.start)
                evidence.append(Evidence(doc_id, at_page.page_id if at_page else None, m.start, m.end,
                                         doc.text[m.start:m.end]))
                continue
            level = f"page {page.page_no}" if page else "the document"
            warnings.append(f"{where}: evidence text not found in {doc_id!r} ({level}), even after normalising "
                            f"and fuzzy matching; kept as {'page' if page else 'document'}-level evidence")
        evidence.append(Evidence(doc_id, page.page_id if page else None))
    if evs and not evidence:
        raise ValueError("no evidence item points at a loaded document: "
                         + "; ".join(f"unknown document {d!r}" for d in unknown))
    lang = language or (by_id[evidence[0].doc_id].language if evidence else "en")
    return Question(str(qid), text.strip(), list(answers), answerable, qtype, lang, evidence, meta)


def derived_question_id(text: str) -> str:
    """The id of a gold line that has none: ``q-`` and 12 hex digits of the sha256 of its whitespace-normalised
    text, so the same file gives the same ids on every run (and a stored run's items stay matched)."""
    norm = " ".join(text.split())
    return "q-" + hashlib.sha256(norm.encode("utf-8")).hexdigest()[:12]


EVIDENCE_KEYS = {"doc", "page", "text", "lines", "symbol"}


def find_symbol(doc: Document, name: str) -> tuple[int, int] | None:
    """(start, end) character offsets of the definition the code index names ``name`` (its qualified name:
    ``Command.get_help``, a TS namespace's ``A.Props``, a Go receiver's ``Type.Method``), or None."""
    parse = getattr(doc, "code_parse", None)
    if parse is None:
        return None
    d = next((d for d in all_defs(parse.defs) if d.name == name), None)
    return def_span(doc.text, d) if d is not None else None


def _page_at(doc: Document, pos: int):
    return next((p for p in doc.pages if p.start <= pos < p.end), None)


# --------------------------------------------------------------------------- bundled sets

BUNDLED = {
    "squad2": "SQuAD 2.0 dev subset (4 articles, answerable + unanswerable)",
    "xquad-en": "XQuAD English subset (parallel ids with xquad-el / xquad-ru)",
    "xquad-el": "XQuAD Greek subset",
    "xquad-ru": "XQuAD Russian subset",
    "docugami": "Docugami SEC 10-Q: 3 PDFs and their questions",
    "mtrag-govt": "MTRAG govt: 28 human multi-turn conversations (214 turns), 833 passages (conversations)",
    "mtrag-clapnq": "MTRAG ClapNQ: 29 human multi-turn conversations (224 turns), 2,000 Wikipedia passages",
    "code-boltons": "code search: 30 Python files of boltons 26.2.0 (docstrings removed), 332 docstring-summary "
                    "queries (38 unanswerable: function removed)",
}
# what a bare `ragwb run` evaluates
MAIN_JOB_SETS = ("squad2", "xquad-en", "xquad-el", "xquad-ru", "docugami", "code-boltons")


def load_bundled(name: str, parse_cache: ParseCache | None = None, progress: bool = False, engine=None) -> Dataset:
    root = datasets_dir()
    if name == "squad2":
        return load_squad(root / "squad2" / "squad2-dev-subset.json.gz", "squad2", "en")
    if name.startswith("xquad-") and name in BUNDLED:
        lang = name.split("-", 1)[1]
        return load_squad(root / "xquad" / f"xquad.{lang}.json.gz", name, lang)
    if name == "docugami":  # no cache given: still read the shipped parsed pages (keyed by content hash)
        return load_docugami(root / "docugami" / "qna_data.csv", root / "docugami" / "docs", "docugami",
                             parse_cache or ParseCache(None), progress, engine)
    if name.startswith("mtrag-") and name in BUNDLED:
        from .conversations import load_mtrag

        return load_mtrag(root / "mtrag" / name.split("-", 1)[1], name)
    if name == "code-boltons":
        return load_code_set(root / "code" / "code-boltons.json.gz", name)
    raise KeyError(f"unknown bundled dataset {name!r}; valid: {', '.join(BUNDLED)}")


def load_any(spec: str, questions: str | None = None, parse_cache: ParseCache | None = None,
             progress: bool = False, follow_symlinks: bool = False, insert_fillers: float = 0.0,
             filler_seed: int = 0, engine=None, name: str | None = None, previous=None, include: tuple = (),
             exclude: tuple = (), gitignore: bool = True, never: tuple = ()) -> Dataset:
    """A bundled name, a SQuAD-style JSON file, or a folder (+ JSONL questions). ``insert_fillers``:
    seeded filler turns ("thanks", "ok") inserted into conversations at that rate (bypass tests).
    ``engine`` (rag/index/engines.py): where files are parsed (default: here)."""
    if spec in BUNDLED:
        if questions:
            raise ValueError(f"--questions {questions} is for folder datasets; the bundled set {spec!r} has its "
                             "own gold questions")
        ds = load_bundled(spec, parse_cache, progress, engine)
    else:
        p = Path(spec)
        if p.is_dir():
            ds = load_folder(p, questions, name=name, parse_cache=parse_cache, progress=progress,
                             follow_symlinks=follow_symlinks, engine=engine, previous=previous, include=include,
                             exclude=exclude, gitignore=gitignore, never=never)
        elif p.suffix in (".json", ".gz") and p.exists():
            ds = load_squad(p)
        else:
            raise KeyError(f"{spec!r} is neither a bundled dataset ({', '.join(BUNDLED)}) nor a folder or SQuAD JSON "
                           "file")
    if insert_fillers:
        if not any(q.conversation_id for q in ds.questions):
            raise ValueError(f"--insert-fillers needs a conversational dataset; {spec!r} has no conversations")
        from .conversations import with_fillers

        ds.questions = with_fillers(ds.questions, insert_fillers, filler_seed)
    return ds
