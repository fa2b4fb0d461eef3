"""Every CSV the product writes goes through here (the judging pool, `ragwb export --format csv`): a text cell a
spreadsheet would run as a formula (a leading ``=``, ``+``, ``-``, ``@``, tab or CR; OWASP's CSV injection) gets a
leading ``'``, in every text column, whatever it holds: question ids, pages and logged answers come from outside."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula (OWASP CSV injection)


_ESCAPED = FORMULA_START + ("'",)  # a cell that starts with the quote itself is escaped too: the escape round-trips


def escape_cell(v):
    """A text cell a spreadsheet will show as text: one that starts like a formula gets a leading quote, and so does
    one that starts with a quote (an id ``'-5`` is written ``''-5``, so reading it back never strips its own quote)."""
    return "'" + v if isinstance(v, str) and v.startswith(_ESCAPED) else v


def unescape_cell(v):
    """What ``escape_cell`` wrote, read back (a cell that only looks escaped is left as it is)."""
    return v[1:] if isinstance(v, str) and v.startswith("'") and v[1:].startswith(_ESCAPED) else v


def safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell escaped (numbers, booleans and missing values untouched)."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c].dtype):
            out[c] = out[c].map(escape_cell)
    return out


def write_csv(df: pd.DataFrame, path: str | Path, **kw) -> None:
    """The one CSV writer: every text cell escaped, no index column, rows ended by CRLF (RFC 4180): the csv module
    quotes a cell holding any character of the line terminator, so a bare CR inside a cell is quoted too (with the
    default LF it was written as is, and a spreadsheet started a new row, and a live formula, at it)."""
    safe_frame(df).to_csv(path, index=False, **{"lineterminator": "\r\n", **kw})
