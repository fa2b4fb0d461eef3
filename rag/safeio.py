"""Safe input and output: what comes from outside parsed with bounds, what the workspace keeps written whole.

Reading. JSON from outside (a service's reply, a logged file, a gold file, claims): parsed with a depth bound.

``json.loads`` of 100,000 nested brackets raises RecursionError deep inside whatever called it (a
traceback, a lost run); nothing real nests past a few dozen levels. ``loads_bounded`` turns both the
parser's recursion limit and a document deeper than ``MAX_DEPTH`` into a ValueError its caller
reports as one line naming the file, row or item.

Writing. Files written whole: a temporary file beside the target, then one atomic replace, so another process (a
reader, a second ingest) never sees half of one. Every cache and snapshot the workspace keeps goes through here.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

MAX_DEPTH = 200


def depth_of(obj, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a parsed JSON value, walked without recursion; stops counting past ``limit``."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def loads_bounded(data, max_depth: int = MAX_DEPTH):
    """``json.loads(data)``, or ValueError when it is not JSON or nests deeper than ``max_depth``."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    if depth_of(obj, max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return obj


def write_whole(path: Path, data: bytes) -> None:
    """``data`` at ``path`` all at once (the temporary name is this process's and thread's: two writers of one
    file never share one)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


_BIDI = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))  # overrides and isolates: text shown out of order


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (C0, DEL, C1: escape sequences that retitle the
    window, clear the screen or hide text) and bidi overrides shown as escapes (``\\x1b``, ``\\u202e``), never sent raw.
    For names that come from outside (file names, ids) in every line the CLI prints about them."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        o = ord(c)
        if o < 0x20 or 0x7F <= o <= 0x9F:
            out.append(f"\\x{o:02x}")
        elif o in _BIDI:
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    return "".join(out)
