"""A questions file (JSONL) as teams write it: ids, answers and evidence optional (a missing field is unknown,
not false), each line checked on its own (a bad line is skipped and named, never the file), evidence located
in the documents (a doc, page, text, lines or symbol)."""
from __future__ import annotations

from rag.errors import env_number

from .readers import ImportError_
import hashlib
import json
from pathlib import Path
from .code import all_defs, def_span, line_starts, lines_span
from rag.models import Document, Evidence, Question, Skipped
from .textmatch import locate
from rag.safeio import loads_bounded


def load_questions_jsonl(path: str | Path, docs: list[Document]) -> tuple[list[Question], list[Skipped]]:
    """Questions from a JSONL file. A bad line is skipped naming file, line and field; an evidence
    item that cannot be placed exactly is downgraded (normalised/fuzzy text, page, document) with a
    warning, never dropping the question (docs/datasets.md)."""
    path = Path(path)
    if path.is_dir():
        raise ImportError_(f"{path}: is a folder; --questions expects a JSONL file")
    if not path.is_file():
        raise ImportError_(f"{path}: questions file not found")
    size = path.stat().st_size
    if size > MAX_QUESTIONS_BYTES:  # refused before it is read (a 1 GB file took 2.2 GB held whole)
        raise ImportError_(f"{path}: {size:,} bytes, over the {MAX_QUESTIONS_BYTES:,} a questions file may hold; "
                           "split it, or sample the questions you mean to measure")
    cap = int(env_number("RAGWB_MAX_QUESTIONS", MAX_QUESTIONS, integer=True))
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
            skipped.append(Skipped(str(path), f"not valid JSON ({e}){json_hint(line)}", line_no))
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
        if len(questions) >= cap:  # named at the line that passes it, before memory follows a million objects
            raise ImportError_(f"{path}:{line_no}: more than {cap:,} questions (RAGWB_MAX_QUESTIONS); a run measures a "
                               "sample: split the file or sample it")
        questions.append(q)
    return questions, skipped


def json_hint(line: str) -> str:
    """What a JSON error on a line most likely is, named (the parser says "Extra data: line 1 column 87")."""
    import re

    s = line.rstrip()
    if s.endswith(","):
        return ": a trailing comma after the closing brace (one object a line, nothing after it)"
    if re.search(r",\s*[}\]]", s):
        return ": a trailing comma before a closing brace or bracket (JSON allows none)"
    if "'" in s and '"' not in s:
        return ": single quotes (JSON strings take double quotes)"
    return ""


QUESTION_FIELDS = ("id", "question", "answers", "answerable", "type", "language", "evidence", "metadata")


def _field(rec: dict, name: str, types: tuple, what: str, default=None, required: bool = False):
    """A typed field; a wrong type is an error naming the field (``"false"`` is not ``false``)."""
    v = rec.get(name)
    if v is None and not required:
        return default
    if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
        raise TypeError(f"field {name!r} must be {what}, got {json.dumps(v)[:60]}")
    return v


MAX_QUESTIONS_BYTES = 256 * 1024 * 1024  # a questions file larger than this is refused before it is read
MAX_QUESTIONS = 500_000  # questions a file may give (RAGWB_MAX_QUESTIONS): more are refused, named, never held
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
        got = _evidence_item(f"evidence[{k}]", ev, by_id, warnings)
        if isinstance(got, str):
            unknown.append(got)
        else:
            evidence.append(got)
    if evs and not evidence:
        raise ValueError("no evidence item points at a loaded document: "
                         + "; ".join(f"unknown document {d!r}" for d in unknown))
    lang = language or (by_id[evidence[0].doc_id].language if evidence else "en")
    return Question(str(qid), text.strip(), list(answers), answerable, qtype, lang, evidence, meta)


def _evidence_item(where: str, ev, by_id: dict[str, Document], warnings: list[str]):
    """One evidence object of a question line as Evidence (located by symbol, lines or text; document- or
    page-level with a warning where it cannot be), or the document id it names when no loaded document has it
    (the caller counts those: a line whose every item is unknown is an error)."""
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
        warnings.append(f"{where} points at unknown document {doc_id!r}; item ignored")
        return doc_id
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
    if ev.get("symbol") is not None:
        return _symbol_evidence(where, ev["symbol"], doc, warnings)
    if ev.get("lines") is not None:
        got = _lines_evidence(where, ev["lines"], doc, warnings)
        if got is not None:
            return got
    return _text_evidence(where, ev.get("text"), doc, page, warnings)


def _symbol_evidence(where: str, sym, doc: Document, warnings: list[str]) -> Evidence:
    """Source code: a qualified definition name (Class.method, ns.Name, Type.Method)."""
    if not isinstance(sym, str) or not sym.strip():
        raise TypeError(f"field '{where}.symbol' must be a qualified name like \"Command.get_help\"")
    found = find_symbol(doc, sym.strip())
    if found is None:
        warnings.append(f"{where}: symbol {sym!r} is not a definition of {doc.doc_id!r} as the index names them; "
                        "kept as document-level evidence")
        return Evidence(doc.doc_id, None)
    s0, e0 = found
    at_page = _page_at(doc, s0)
    return Evidence(doc.doc_id, at_page.page_id if at_page else None, s0, e0, doc.text[s0:e0], sym.strip(), s0, e0)


def _lines_evidence(where: str, lines, doc: Document, warnings: list[str]) -> Evidence | None:
    """Source code: [first, last] 1-based lines, the usual way to point at code; None when out of range (said)."""
    if (not isinstance(lines, list) or len(lines) != 2 or any(isinstance(x, bool) or not isinstance(x, int)
                                                              for x in lines)):
        raise TypeError(f"field '{where}.lines' must be [first, last] (1-based line numbers), got "
                        f"{json.dumps(lines)}")
    starts = line_starts(doc.text)
    if not 1 <= lines[0] <= lines[1] <= len(starts):
        warnings.append(f"{where}: lines {lines} out of range for {doc.doc_id!r} ({len(starts)} lines); "
                        "kept as document-level evidence")
        return None
    s0, e0 = lines_span(doc.text, lines[0] - 1, lines[1] - 1)
    at_page = _page_at(doc, s0)
    return Evidence(doc.doc_id, at_page.page_id if at_page else None, s0, e0, doc.text[s0:e0])


def _text_evidence(where: str, span, doc: Document, page, warnings: list[str]) -> Evidence:
    """A quoted text located in the page (or the document): exactly, normalised, or fuzzily (said); else the
    page or document itself, said."""
    doc_id = doc.doc_id
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
            return Evidence(doc_id, at_page.page_id if at_page else None, m.start, m.end, doc.text[m.start:m.end])
        level = f"page {page.page_no}" if page else "the document"
        warnings.append(f"{where}: evidence text not found in {doc_id!r} ({level}), even after normalising "
                        f"and fuzzy matching; kept as {'page' if page else 'document'}-level evidence")
    return Evidence(doc_id, page.page_id if page else None)


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
