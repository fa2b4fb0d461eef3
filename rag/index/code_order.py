"""Ranking on an index holding code: exact names first, stubs and imports last (budgets exact_names, stubs, imports),
and `where` filters over kind, symbol, file and language (docs/strategies.md, Code corpora)."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import field
import numpy as np
from rag.ingest.code import KINDS


STUB_POLICIES = ("last", "keep")


# a name as people type it: dotted, `::` or `#` joined; Ruby's `?` and `!` stay part of the last name (`put?`)
_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|#)[A-Za-z_$][\w$]*)*[?!]?")


def query_names(question: str) -> set[str]:
    """The definition names a query spells out: a query that is one name (``evolve``, ``Command.get_help``,
    `` `parse_args()` ``), or, inside a sentence, a qualified name (``Command.get_help``, ``std::fs::read``).
    A bare word inside a sentence never counts, not even ``snake_case`` or `` `quoted` ``: sentences name
    neighbours (`like :func:`sorted`, but ...`), and measured on code-boltons those cost evidence MRR@10
    0.494 -> 0.476, where qualified names cost nothing. ``::`` and ``#`` read as ``.`` (Rust, Ruby)."""
    q = question.strip()
    whole = len(q.strip("`'\"").split()) == 1
    out = set()
    for m in _NAME.finditer(q):
        t = m.group(0)
        if whole or "." in t or "::" in t or "#" in t:
            out.add(t.replace("::", ".").replace("#", "."))
    return out


def named_rows(reader: "IndexReader", name: str) -> list[int]:
    """The chunk rows a typed name means: the definition of that full qualified name; else every definition whose
    path ends in the name and holds the typed qualifiers in order (``Request.put?``, ``Helpers.put?`` and ``put?``
    all name ``Rack.Request.Helpers.put?``: issue 86), the fullest match (fewest skipped qualifiers) first."""
    rows = reader.symbol_rows.get(name)
    if rows:
        return list(rows)
    if name[-1:] in "?!":  # Ruby's `put?` is its name; elsewhere a question's own "?" ("What does x.get?")
        found = _suffix_rows(reader, name)
        return found or named_rows(reader, name[:-1])
    return _suffix_rows(reader, name)


def _suffix_rows(reader: "IndexReader", name: str) -> list[int]:
    parts = name.split(".")
    found = []
    for sym, rs in reader.symbols_by_last.get(parts[-1], ()):
        path = sym.split(".")[:-1]
        i = 0
        for p in path:  # the typed qualifiers, in order, among the symbol's own
            if i < len(parts) - 1 and p == parts[i]:
                i += 1
        if i == len(parts) - 1:
            found.append((len(path) - i, sym, rs))
    return [r for _, _, rs in sorted(found, key=lambda x: (x[0], x[1])) for r in rs]


def code_order(reader: "IndexReader", question: str, rows, scores, key: "SearchKey", qvec=None, mask=None):
    """A code index's ranking with exact names first and stubs last (``key.exact_names``, ``key.stubs``,
    ``key.imports``): the chunks whose qualified symbol is a name the query spells out (``query_names``) lead,
    by score, even from outside the pool (scored against ``qvec``); stub chunks (kind ``stub``) and import-only
    chunks (kind ``imports``) follow every implementation, in their order. Prose indexes, or all switched off,
    come back as they were."""
    if not reader.has_code or (not key.exact_names and key.stubs == "keep" and key.imports == "keep"):
        return rows, scores
    rows = np.asarray(rows, np.int64)
    scores = np.asarray(scores, np.float32)
    lead = np.zeros(len(rows), bool)
    if key.exact_names:
        wanted = [r for n in query_names(question) for r in named_rows(reader, n) if mask is None or mask[r]]
        if wanted:
            have = set(rows.tolist())
            extra = [r for r in dict.fromkeys(wanted) if r not in have]
            if extra and qvec is not None and reader.vectors is not None:  # named but outside the pool
                rows = np.concatenate([rows, np.array(extra, np.int64)])
                scores = np.concatenate([scores, (reader.vectors[extra] @ qvec).astype(np.float32)])
            lead = np.isin(rows, np.array(wanted, np.int64))
    stub = np.zeros(len(rows), bool)
    back = {k for k, policy in (("stub", key.stubs), ("imports", key.imports)) if policy == "last"}
    if back and len(reader.kinds):  # no implementation in them: below every chunk that has one
        kinds = reader.kinds
        stub = np.fromiter((kinds[int(r)] in back for r in rows), bool, len(rows))
    # tiers: exact implementations, other implementations, exact stubs, other stubs; by score within a tier
    # (the exact ones) or in the order given (the rest: fusion's order stays fusion's)
    tier = np.where(stub, 2, 0) + np.where(lead, 0, 1)
    pos = np.arange(len(rows))
    within = np.where(lead, -scores, pos.astype(np.float32))
    order = np.lexsort((pos, within, tier))
    return rows[order], scores[order]


# FIELD=GLOB over each chunk's stored columns; several joined by ";" must all hold
WHERE_FIELDS = {"kind": "kinds", "symbol": "symbols", "file": "doc_ids", "language": "code_languages"}


def parse_where(where: str) -> list[tuple[str, str]]:
    """``"kind=method;file=src/*.py"`` -> [("kind", "method"), ("file", "src/*.py")]. An unknown field, or a
    kind no chunk can have, is an error naming the valid ones (a typo never filters everything away quietly)."""
    out = []
    for part in (where or "").split(";"):
        part = part.strip()
        if not part:
            continue
        field_, sep, glob = (x.strip() for x in part.partition("="))
        if not sep or not field_ or not glob:
            raise ValueError(f"where {part!r}: expected FIELD=GLOB, e.g. kind=method (fields: "
                             f"{', '.join(WHERE_FIELDS)})")
        if field_ not in WHERE_FIELDS:
            raise ValueError(f"where: unknown field {field_!r}; valid: {', '.join(WHERE_FIELDS)}")
        if field_ == "kind" and not fnmatch.filter(KINDS, glob):
            raise ValueError(f"where: kind {glob!r} matches no kind; valid: {', '.join(KINDS)}")
        out.append((field_, glob))
    return out


def where_mask(reader: "IndexReader", where: str) -> np.ndarray | None:
    """Chunk rows a ``where`` keeps (None: no filter). Matching nothing is an error, never an empty context."""
    conds = parse_where(where)
    if not conds:
        return None
    memo = reader.where_masks.get(where)
    if memo is not None:
        return memo
    n = len(reader.chunk_ids)
    mask = np.ones(n, bool)
    for field_, glob in conds:
        col = getattr(reader, WHERE_FIELDS[field_])
        vals = list(col) if len(col) == n else [""] * n  # prose indexes have no code columns
        mask &= np.fromiter((fnmatch.fnmatchcase(v or "", glob) for v in vals), bool, n)
    if not mask.any():
        raise ValueError(f"where {where!r} matches no chunk of index {reader.index}")
    reader.where_masks[where] = mask
    return mask
