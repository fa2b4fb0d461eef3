"""The LanceDB tables of an index: their schemas and how a document, page, parent or chunk becomes a
row. Shared by the workspace (rag/index/workspace.py) and the execution engines (rag/index/engines.py), so neither
imports the other back."""
from __future__ import annotations

import pyarrow as pa

from rag.textproc import analyze
from rag.tokens import count_tokens

_STR, _INT = pa.string(), pa.int64()
SCHEMAS = {
    # n_pages / n_parents / n_chunks let every ingest verify that a document's rows are complete
    "documents": pa.schema([("doc_id", _STR), ("title", _STR), ("language", _STR), ("source_path", _STR),
                            ("content_hash", _STR), ("n_pages", _INT), ("n_tokens", _INT), ("text", _STR),
                            ("n_parents", _INT), ("n_chunks", _INT)]),
    "pages": pa.schema([("page_id", _STR), ("doc_id", _STR), ("page_no", _INT), ("start", _INT), ("end", _INT),
                        ("text", _STR), ("n_tokens", _INT)]),
    "parents": pa.schema([("parent_id", _STR), ("doc_id", _STR), ("page_id", _STR), ("start", _INT),
                          ("end", _INT), ("text", _STR), ("n_tokens", _INT), ("header_path", pa.list_(_STR))]),
}


def chunk_schema(dim: int) -> pa.Schema:
    return pa.schema([("chunk_id", _STR), ("doc_id", _STR), ("page_id", _STR), ("chunk_index", _INT),
                      ("start", _INT), ("end", _INT), ("text", _STR), ("n_tokens", _INT), ("parent_id", _STR),
                      ("header_path", pa.list_(_STR)), ("breadcrumb", _STR), ("language", _STR),
                      ("bm25_text", _STR), ("code_language", _STR), ("symbol", _STR), ("kind", _STR),
                      ("line_start", _INT), ("line_end", _INT), ("vector", pa.list_(pa.float32(), dim))])


def document_row(d, cfg, n_parents: int, n_chunks: int) -> dict:
    return {"doc_id": d.doc_id, "title": d.title, "language": d.language, "source_path": d.source_path,
            "content_hash": d.index_hash, "n_pages": len(d.pages),
            "n_tokens": count_tokens(d.text, cfg.chunking.encoding), "text": d.text,
            "n_parents": n_parents, "n_chunks": n_chunks}


def page_rows(d, cfg) -> list[dict]:
    return [{"page_id": p.page_id, "doc_id": d.doc_id, "page_no": p.page_no, "start": p.start, "end": p.end,
             "text": p.text, "n_tokens": count_tokens(p.text, cfg.chunking.encoding)} for p in d.pages]


def parent_row(p) -> dict:
    return {"parent_id": p.parent_id, "doc_id": p.doc_id, "page_id": p.page_id, "start": p.start, "end": p.end,
            "text": p.text, "n_tokens": p.n_tokens, "header_path": p.header_path}


def chunk_row(c, language: str) -> dict:
    """A chunks-table row without its vector (the same in every engine)."""
    return {"chunk_id": c.chunk_id, "doc_id": c.doc_id, "page_id": c.page_id, "chunk_index": c.chunk_index,
            "start": c.start, "end": c.end, "text": c.text, "n_tokens": c.n_tokens, "parent_id": c.parent_id,
            "header_path": c.header_path, "breadcrumb": c.breadcrumb, "language": language,
            # source code: identifiers split (parseHeader -> parse header) so words find them
            "bm25_text": " ".join(analyze(c.embed_text, language, identifiers=bool(c.code_language))),
            "code_language": c.code_language, "symbol": c.symbol, "kind": c.kind, "line_start": c.line_start,
            "line_end": c.line_end}
