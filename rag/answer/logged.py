"""Logged outputs of a RAG system: the records ``ragwb score FILE`` reads (docs/your-system.md).

A file is JSONL, CSV or parquet with one record per answered question, in either vocabulary:

* ragas's: ``user_input`` (the question), ``retrieved_contexts`` (list of texts), ``response`` (the
  answer), optional ``reference`` (the gold answer) and ``reference_contexts``;
* the workbench's: ``question``, ``contexts`` (texts, or objects ``{"text", "doc_id", "page_id",
  "score"}``), ``answer``, optional ``question_id``, ``reference``, ``prompt_tokens``,
  ``completion_tokens``, ``latency_ms``.

In CSV a list column holds JSON (``["text one", "text two"]``) or a Python list (``['text one', 'text two']``,
what pandas' ``to_csv`` writes); a cell may hold up to MAX_CELL_MB (16 MB, ``--max-cell-mb``). A file missing a required column, or
a record whose fields have the wrong type, is an error naming the file, the row and the column.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rag.llm.client import MAX_USAGE_TOKENS
from rag.safeio import loads_bounded

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


MAX_CELL_MB = 16  # a cell (a JSONL line) larger than this is refused naming its row: 200 MB took 3.2 GB


def max_cell_chars(mb: float | None = None) -> int:
    return int((MAX_CELL_MB if mb is None else mb) * 1_000_000)


def _parquet_rows(path: Path, cap: int):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        row = 0
        for batch in pf.iter_batches(batch_size=2048):  # a row group at a time, never the whole file
            for rec in batch.to_pylist():
                row += 1
                for col, v in rec.items():
                    if isinstance(v, str) and len(v) > cap:
                        raise ValueError(f"{path}: row {row}: column {col!r} holds {len(v):,} characters, over the "
                                         f"cap of {cap:,} (--max-cell-mb)")
                yield {**rec, "__line": row}
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged file is one line naming it
        raise ValueError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None


def _csv_rows(path: Path, cap: int):
    import csv

    # real logs hold whole documents in one field: allow big fields up to the cap (csv's default is 128 KB,
    # and its error is a traceback); the reader streams, so memory follows the largest row, not the file.
    # The limit is the process's: set for each row read, and put back, so no other reader inherits it
    state = {"line": 0}

    def lines(fh):
        """Each physical line decoded on its own (a bad byte is named at its own line and row, not at the start of
        the 8 KB block the text decoder read ahead), and none held past the bound: a 1 GB one-line CSV is refused
        after reading ``line_cap`` bytes, never held whole."""
        line_cap = cap * 4 + (1 << 20)  # a cell at the cap (up to 4 bytes a character) and the rest of its row
        while True:
            raw = fh.readline(line_cap + 1)
            if not raw:
                return
            state["line"] += 1
            if len(raw) > line_cap:
                raise ValueError(f"{path}: line {state['line']} (row {row + 1}): longer than {line_cap:,} bytes "
                                 "with no line break (the cell cap, --max-cell-mb, bounds each cell)")
            if state["line"] == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: line {state['line']} (row {row + 1}): not UTF-8 text ({e.reason}: byte "
                                 f"0x{raw[e.start]:02x} at column {e.start + 1})") from None

    with open(path, "rb") as fh:
        reader = csv.DictReader(lines(fh))
        row = 0
        try:
            while True:
                prev = csv.field_size_limit(cap)
                try:
                    rec = next(reader, None)
                finally:
                    csv.field_size_limit(prev)
                if rec is None:
                    return
                row += 1
                yield {**rec, "__line": row}
        except csv.Error as e:
            if "field larger than field limit" in str(e):
                raise ValueError(f"{path}: row {row + 1}: a field over the cap of {cap:,} characters "
                                 "(--max-cell-mb)") from None
            raise ValueError(f"{path}: row {row + 1}: not a readable CSV row ({e})") from None


def _jsonl_lines(path: Path, cap: int):
    """(line number, text) of each non-blank line, read a line at a time; a line longer than ``cap``
    bytes is refused naming it before it is held whole."""
    with open(path, "rb") as fh:
        head = fh.read(3)
        fh.seek(0)
        if head[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its byte-order mark
            import io

            lines = io.TextIOWrapper(fh, encoding="utf-16")
            for line_no, line in enumerate(lines, 1):
                if len(line) > cap:
                    raise ValueError(f"{path}:{line_no}: a line of {len(line):,} characters, over the cap of "
                                     f"{cap:,} (--max-cell-mb)")
                if line.strip():
                    yield line_no, line.rstrip("\r\n")
            return
        if head == b"\xef\xbb\xbf":
            fh.seek(3)
        line_no = 0
        while True:
            raw = fh.readline(cap + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > cap and not raw.endswith(b"\n"):
                raise ValueError(f"{path}:{line_no}: a line over the cap of {cap:,} bytes (--max-cell-mb)")
            if not raw.strip():
                continue
            try:
                yield line_no, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column "
                                 f"{e.start + 1})") from None


def _jsonl_rows(path: Path, cap: int):
    for line_no, line in _jsonl_lines(path, cap):
        try:
            rec = loads_bounded(line)
        except ValueError as e:
            raise ValueError(f"{path}:{line_no}: not valid JSON ({e})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{line_no}: a record must be a JSON object")
        yield {**rec, "__line": line_no}


def _rows(path: Path, cap: int):
    """The file's raw records, streamed (dicts with their 1-based row as ``__line``)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(path, cap)
    if suffix == ".csv":
        return _csv_rows(path, cap)
    if suffix not in (".jsonl", ".json", ".ndjson"):
        raise ValueError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .csv or .parquet")
    return _jsonl_rows(path, cap)


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


def _columns(path: Path, first: dict) -> tuple[str, dict]:
    """The vocabulary of a file from its first record (CSV and parquet: the header), or the error naming
    the missing columns."""
    cols = set(first)
    vocab, names = ("ragas", RAGAS) if "user_input" in cols else ("workbench", OWN)
    missing = [c for c in names.values() if c not in cols]
    if missing:
        other = OWN if vocab == "ragas" else RAGAS
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (needs {', '.join(names.values())}, "
                         f"or ragas's {', '.join(other.values())}" if vocab == "workbench" else
                         f"{path}: missing column(s) {', '.join(missing)} (ragas columns: {', '.join(names.values())})")
    return vocab, names


def _record(r: dict, path: Path, names: dict, row: int) -> LoggedRecord:
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
    return LoggedRecord(row, q.strip(), a.strip(), ctx, str(qid) if qid not in (None, "") else None, ref,
                        _int(r.get("prompt_tokens"), path, row, "prompt_tokens"),
                        _int(r.get("completion_tokens"), path, row, "completion_tokens"), lat)


def iter_logged(path: str | Path, max_cell_mb: float | None = None):
    """(vocabulary, records): the vocabulary ("ragas" or "workbench", from the first record) and an
    iterator of the file's LoggedRecords, read a row at a time so memory follows a row, not the file.
    A malformed row raises ValueError naming the file, the row and the column when the iterator reaches it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    cap = max_cell_chars(max_cell_mb)
    rows = _rows(path, cap)
    first = next(rows, None)
    if first is None:
        raise ValueError(f"{path}: no records")
    vocab, names = _columns(path, first)
    return vocab, Records(first, rows, path, names)


class Records:
    """The file's LoggedRecords, read a row at a time. A row holding text no store can keep (a lone surrogate, as
    a JSON ``"\\ud800"`` decodes) is a named bad row: skipped, said in ``skipped`` (row, why), never a failure
    that leaves batches half-committed; every pass over the file skips the same rows."""

    def __init__(self, first: dict, rows, path: Path, names: dict):
        self.first, self.rows, self.path, self.names = first, rows, path, names
        self.skipped: list[tuple[int, str]] = []
        self._gen = self._records()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._gen)

    def _records(self):
        import itertools

        for r in itertools.chain([self.first], self.rows):
            bad = _unstorable(r)
            if bad:
                self.skipped.append((r["__line"], f"column {bad!r}: text with a lone surrogate (not UTF-8); row skipped"))
                continue
            yield _record(r, self.path, self.names, r["__line"])


def _unstorable(obj, where: str = "") -> str:
    """The column (or nested field) of ``obj`` holding a string that cannot be encoded as UTF-8, else ""."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return where or "?"
        return ""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k != "__line" and (bad := _unstorable(v, where or str(k))):
                return bad
        return ""
    if isinstance(obj, (list, tuple)):
        for v in obj:
            if bad := _unstorable(v, where):
                return bad
    return ""


def read_logged(path: str | Path) -> tuple[list[LoggedRecord], str]:
    """The records of a logged file (all in memory) and which vocabulary it used ("ragas" or
    "workbench"); ``iter_logged`` streams them."""
    vocab, recs = iter_logged(path)
    return list(recs), vocab
