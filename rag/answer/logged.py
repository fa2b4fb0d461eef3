"""Logged outputs of a RAG system: the records ``ragwb score FILE`` reads (docs/your-system.md).

A file is JSONL, CSV or parquet with one record per answered question, in either vocabulary:

* ragas's: ``user_input`` (the question), ``retrieved_contexts`` (list of texts), ``response`` (the
  answer), optional ``reference`` (the gold answer) and ``reference_contexts``;
* the workbench's: ``question``, ``contexts`` (texts, or objects ``{"text", "doc_id", "page_id",
  "score"}``), ``answer``, optional ``question_id``, ``reference``, ``prompt_tokens``,
  ``completion_tokens``, ``latency_ms``.

In CSV a list column holds JSON (``["text one", "text two"]``) or a Python list (``['text one', 'text two']``,
what pandas' ``to_csv`` writes); a field may be as large as the file. A file missing a required column, or
a record whose fields have the wrong type, is an error naming the file, the row and the column.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rag.llm.client import MAX_USAGE_TOKENS
from rag.jsonsafe import loads_bounded

RAGAS = {"question": "user_input", "contexts": "retrieved_contexts", "answer": "response"}
OWN = {"question": "question", "contexts": "contexts", "answer": "answer"}


@dataclass
class LoggedRecord:
    row: int  # 1-based row (line) in the file
    question: str
    answer: str
    contexts: list = field(default_factory=list)  # [{"text", "doc_id"?, "page_id"?, "score"?}]
    question_id: str | None = None
    reference: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float | None = None


def _rows(path: Path) -> list[dict]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # noqa: BLE001 - a damaged file is one line naming it
            raise ValueError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    if suffix == ".csv":
        import csv
        import io

        # real logs hold whole documents in one field: allow big fields (csv's default cap is 128 KB, and
        # its error is a traceback), still bounded by the file's own size
        csv.field_size_limit(max(csv.field_size_limit(), min(path.stat().st_size + 1, 2**31 - 1)))
        try:
            return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        except csv.Error as e:
            raise ValueError(f"{path}: not a readable CSV file ({e})") from None
    if suffix not in (".jsonl", ".json", ".ndjson"):
        raise ValueError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .csv or .parquet")
    from rag.ingest.conversations import decode_lines

    out = []
    for line_no, line, why in decode_lines(path.read_bytes()):
        if line is None:
            raise ValueError(f"{path}:{line_no}: {why}")
        try:
            rec = loads_bounded(line)
        except ValueError as e:
            raise ValueError(f"{path}:{line_no}: not valid JSON ({e})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{line_no}: a record must be a JSON object")
        out.append({**rec, "__line": line_no})
    return out


def _list(v, path: Path, row: int, col: str) -> list:
    if v is None or (isinstance(v, float) and v != v):
        return []
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            try:
                v = loads_bounded(s)
            except ValueError as e:
                if "nested deeper" in str(e):
                    raise ValueError(f"{path}: row {row}: column {col!r}: {e}") from None
                v = _python_list(s)  # pandas' to_csv writes lists as Python reprs: ['a', 'b']
                if v is None:
                    raise ValueError(f"{path}: row {row}: column {col!r} is not a list (write it as JSON, "
                                     "[\"text one\", \"text two\"], or as a Python list, ['text one', 'text two'])"
                                     ) from None
        else:
            return [s] if s else []
    if hasattr(v, "tolist"):
        v = v.tolist()
    if not isinstance(v, list):
        raise ValueError(f"{path}: row {row}: column {col!r} must be a list of texts, got {type(v).__name__}")
    return v


def _python_list(s: str) -> list | None:
    """A Python list literal of texts (``['a', "b"]``, what pandas writes to CSV), read without evaluating
    code (ast.literal_eval accepts literals only); None when it is not one."""
    import ast

    try:
        v = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return v if isinstance(v, list) else None


def _int(v, path: Path, row: int, col: str) -> int | None:
    if v in (None, ""):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if not (f == f and f.is_integer() and 0 <= f <= MAX_USAGE_TOKENS):
        raise ValueError(f"{path}: row {row}: column {col!r} must be a token count, got {v!r}")
    return int(f)


def read_logged(path: str | Path) -> tuple[list[LoggedRecord], str]:
    """The records of a logged file and which vocabulary it used ("ragas" or "workbench")."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows = _rows(path)
    if not rows:
        raise ValueError(f"{path}: no records")
    cols = set().union(*(r.keys() for r in rows))
    vocab, names = ("ragas", RAGAS) if "user_input" in cols else ("workbench", OWN)
    missing = [c for c in names.values() if c not in cols]
    if missing:
        other = OWN if vocab == "ragas" else RAGAS
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (needs {', '.join(names.values())}, "
                         f"or ragas's {', '.join(other.values())}" if vocab == "workbench" else
                         f"{path}: missing column(s) {', '.join(missing)} (ragas columns: {', '.join(names.values())})")
    out = []
    for i, r in enumerate(rows, 1):
        row = r.get("__line", i)
        q, a = r.get(names["question"]), r.get(names["answer"])
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"{path}: row {row}: column {names['question']!r} must be a non-empty text")
        if a is None or (isinstance(a, float) and a != a):
            a = ""
        if not isinstance(a, str):
            raise ValueError(f"{path}: row {row}: column {names['answer']!r} must be text, got {type(a).__name__}")
        ctx = []
        for j, c in enumerate(_list(r.get(names["contexts"]), path, row, names["contexts"])):
            if isinstance(c, str):
                ctx.append({"text": c})
            elif isinstance(c, dict) and isinstance(c.get("text"), str):
                ctx.append({k: c[k] for k in ("text", "doc_id", "page_id", "score") if c.get(k) is not None})
            else:
                raise ValueError(f"{path}: row {row}: context {j} must be a text or an object with 'text'")
        ref = r.get("reference")
        ref = ref if isinstance(ref, str) and ref.strip() else None
        qid = r.get("question_id")
        lat = r.get("latency_ms")
        try:
            lat = float(lat) if lat not in (None, "") else None
        except (TypeError, ValueError):
            raise ValueError(f"{path}: row {row}: column 'latency_ms' must be a number, got {lat!r}") from None
        if lat is not None and not (0 <= lat < float("inf")):  # NaN fails both comparisons
            raise ValueError(f"{path}: row {row}: column 'latency_ms' must be a finite number >= 0, got {lat!r}")
        out.append(LoggedRecord(row, q.strip(), a.strip(), ctx, str(qid) if qid not in (None, "") else None, ref,
                                _int(r.get("prompt_tokens"), path, row, "prompt_tokens"),
                                _int(r.get("completion_tokens"), path, row, "completion_tokens"), lat))
    return out, vocab
