"""The gold-set model: documents split into pages, and questions with gold evidence.

Documented in docs/datasets.md. Offsets are Python string (code point) offsets.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass
class Page:
    page_id: str
    doc_id: str
    page_no: int  # 0-based position within the document
    start: int  # char offset of the page in the document text
    end: int
    text: str


# bump when code chunks change shape (rag/ingest/code/chunks.py): every indexed source file is re-chunked
CODE_CHUNKS_VERSION = 8  # 4: a doc-only piece carries its signature; one-line pieces join a neighbour
# 5: a TS generic call signature on its own line no longer breaks the parse (the grammar gap is gone)
# 6: a JSDoc block or a /// run a blank line or two above its definition belongs to it; a comment-only gap (a
#    section banner, a licence header) joins the definition after it, never a chunk of its own
# 7: a /** */ block attaches whatever its inner lines start with (Javadoc without `*`), Rust attributes and
#    annotations between a doc and its item keep them together, a Rust impl is named without its generics
# 8: C/C++ through their macros; a split definition's first piece holds its doc and signature; Doxygen pages and
#    long banners are `doc` chunks; in C, C++ and Rust no chunk of one or two lines stands alone (issue 86)


@dataclass
class Document:
    doc_id: str
    title: str
    language: str
    source_path: str
    text: str
    pages: list[Page] = field(default_factory=list)
    is_markdown: bool = False
    code_language: str = ""  # source code: python, go, ... (rag/code); '' for prose
    code_parse: object = field(default=None, repr=False, compare=False)  # rag.code.CodeParse, parsed once

    @property
    def content_hash(self) -> str:
        return content_hash(self.text)

    @property
    def index_hash(self) -> str:
        """What an index stores to know a document unchanged: its content hash, and for source code the code
        chunker's version, so a stored file is re-chunked when the chunker changes (never a mixed index)."""
        h = self.content_hash
        return f"{h}+code{CODE_CHUNKS_VERSION}" if self.code_language else h


@dataclass
class Evidence:
    doc_id: str
    page_id: str | None = None
    start: int | None = None  # char span in the document text, when known
    end: int | None = None
    text: str | None = None
    # source code: the definition the evidence lies in (its qualified name and char span), for symbol_recall@10
    # and symbol_mrr@10; set from a gold `symbol` key, or for span evidence by the index's parse of the file
    symbol: str | None = None
    symbol_start: int | None = None
    symbol_end: int | None = None

    @property
    def level(self) -> str:
        if self.start is not None:
            return "span"
        return "page" if self.page_id else "document"


@dataclass
class Question:
    qid: str
    text: str
    answers: list[str]
    answerable: bool | None  # None: unknown (a gold line without 'answers'); answer/abstention metrics n/a
    qtype: str = ""
    language: str = "en"
    evidence: list[Evidence] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)  # any extra gold fields (company, doc type, ...)
    conversation_id: str = ""  # multi-turn sets: the conversation and 1-based turn of this question
    turn: int = 0
    rewrite: str = ""  # the set's standalone rewrite of a conversational turn (oracle query)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Question":
        ev = [Evidence(**e) for e in d.get("evidence", [])]
        return cls(**{**d, "evidence": ev, "metadata": dict(d.get("metadata") or {})})


def known_answerability(value) -> bool | None:
    """True / False as stored, None for unknown: a gold line without 'answers', read back from a store as
    None, NaN or pandas' NA (whose truth value raises)."""
    if value is None:
        return None
    try:
        return None if value != value else bool(value)
    except TypeError:  # pandas' NA: its comparisons are NA, whose truth value raises
        return None


def gold_text(answers, answerable) -> str:
    """The gold as a reader sees it: the reference answers; "(unanswerable)" only where the gold says so; and a
    missing 'answers' field is unknown, never unanswerable."""
    answers = [str(a) for a in (answers or [])]
    known = known_answerability(answerable)
    if answers:
        return " | ".join(answers)
    if known is False:
        return "(unanswerable)"
    return "answerability unknown (no reference answer)" if known is None else "(no reference answer)"


@dataclass
class Skipped:
    """A file or gold line left out (``kind="skipped"``), or kept with a downgrade (``"warning"``)."""
    path: str
    reason: str
    line: int | None = None
    kind: str = "skipped"

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {'warning: ' if self.kind == 'warning' else ''}{self.reason}"


@dataclass
class Dataset:
    name: str
    documents: list[Document]
    questions: list[Question]
    skipped: list[Skipped] = field(default_factory=list)
    parse_seconds: dict = field(default_factory=dict)  # source path -> seconds spent parsing it
    # a folder read by Workspace.load: its resolved path, when the read began, the filters it was read with
    # (an ingest records the files' stats then: rag/index/freshness.py)
    source_folder: str = ""
    read_started_ns: int = 0
    folder_filters: dict = field(default_factory=dict)
    load_seconds: float = 0.0  # a folder's read: listing (ignore rules, patterns) and parsing, for the ingest total

    def doc(self, doc_id: str) -> Document:
        return self._by_id()[doc_id]

    def _by_id(self) -> dict[str, Document]:
        if getattr(self, "_ids", None) is None or len(self._ids) != len(self.documents):
            self._ids = {d.doc_id: d for d in self.documents}
        return self._ids


def pages_from_paragraphs(doc_id: str, paragraphs: list[str], sep: str = "\n\n") -> tuple[str, list[Page]]:
    """Join paragraphs into one document text and return one page per paragraph."""
    pages, parts, pos = [], [], 0
    for i, p in enumerate(paragraphs):
        if i:
            parts.append(sep)
            pos += len(sep)
        pages.append(Page(f"{doc_id}#p{i}", doc_id, i, pos, pos + len(p), p))
        parts.append(p)
        pos += len(p)
    return "".join(parts), pages
