"""Importers: SQuAD 2.0 / SQuAD 1.1 (XQuAD) JSON, Docugami-style CSV + PDFs, and a
user's own folder of .md/.txt/.pdf/.docx/.html files with a JSONL question file.

Every importer is tolerant: a bad file or a bad gold line becomes a ``Skipped``
entry that names the file (and line) and says why; everything else still loads.
Source files are only ever opened for reading.
"""
from __future__ import annotations

from .parse_pool import parse_files
from .readers import ImportError_, ParseCache, datasets_dir, load_code_set, open_text, slug
from .folders import load_folder
import csv
import fnmatch
import json
import re
from pathlib import Path

from rag.models import Dataset, Document, Evidence, Question, Skipped, pages_from_paragraphs
from rag.safeio import loads_bounded


# --------------------------------------------------------------------------- SQuAD / XQuAD

def load_squad(path: str | Path, name: str | None = None, language: str = "en") -> Dataset:
    """SQuAD 2.0 JSON (``is_impossible``) or SQuAD 1.1-style JSON such as XQuAD.

    One document per article entry, one page per paragraph; gold evidence is the
    answer spans, mapped to document offsets.
    """
    path = Path(path)
    try:
        raw = loads_bounded(open_text(path))
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


# --------------------------------------------------------------------------- Docugami


def load_docugami(csv_path: str | Path, docs_dir: str | Path, name: str = "docugami",
                  parse_cache: ParseCache | None = None, progress: bool = False, engine=None) -> Dataset:
    """Docugami KG-RAG CSV (Question, Source Docs glob, Question Type, ..., Answer) plus PDFs.

    Evidence is document-level: every PDF whose file name matches the question's glob.
    """
    csv_path, docs_dir = Path(csv_path), Path(docs_dir)
    docs, skipped, seconds = parse_files([(pdf, slug(pdf.stem)) for pdf in sorted(docs_dir.glob("*.pdf"))], "en",
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


def dataset_spec(spec: str) -> str:
    """What a stored run names as its dataset, by load_any's own precedence: a bundled set by its name, a folder or
    a SQuAD JSON file by its absolute path, so a run's config (and `ragwb best`'s TOML) runs from any working folder
    (a folder's bare name ran only from its parent: issue 72). Anything else is kept as given (load_any names it)."""
    if spec in BUNDLED:
        return spec
    p = Path(spec)
    return str(p.resolve()) if p.is_dir() or (p.suffix in (".json", ".gz") and p.is_file()) else spec


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
