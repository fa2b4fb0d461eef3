"""Is a folder's index current, without reading the folder? (``ragwb search`` answers from the index then.)

Every ingest of a folder writes a snapshot beside the index (``cache/file_stats/<index>.json``): each indexed
file's size and modification time, the modification time of the folder and of every folder holding an indexed
file (a file added or removed there changes it), the include/exclude/.gitignore filters it was read with, and
the code chunker's version. The index is current when all of those still hold: a few thousand ``stat`` calls
(milliseconds) instead of reading and parsing every file (seconds). A file modified while the ingest read it
(its time at or after the read began) is recorded as unknown, so the next look reads the folder again.

What it cannot see: a change that keeps a file's size and modification time (``touch -d`` back-dating an edit
of the same length), and a file added in a folder that held no indexed file (say, a new ``.py`` beside only
skipped binaries) under an unchanged parent. ``ragwb search --refresh`` reads the folder whatever the snapshot
says.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from rag.safeio import write_whole
from rag.models import CODE_CHUNKS_VERSION


def _path(root: Path, index: str) -> Path:
    return root / "cache" / "file_stats" / f"{index}.json"


def write_snapshot(root: Path, index: str, folder: str, started_ns: int, sources: list[str], filters: dict) -> None:
    """Record what the index of ``folder`` was built from (``sources``: the indexed files' paths)."""
    files, dirs = {}, {}
    base = Path(folder)
    for src in sources:
        try:
            st = os.stat(src)
        except OSError:
            files[src] = None  # gone already: the next look reads the folder
            continue
        files[src] = None if st.st_mtime_ns >= started_ns else [st.st_size, st.st_mtime_ns]
        d = Path(src).parent
        while True:  # the folders between the file and the corpus root
            dirs.setdefault(str(d), None)
            if d == base or d == d.parent or base not in d.parents:
                break
            d = d.parent
    if base.is_dir():  # (a bundled set is a name, not a folder: only the chunker's version is recorded)
        dirs.setdefault(str(base), None)
    for d in dirs:
        try:
            m = os.stat(d).st_mtime_ns
            dirs[d] = None if m >= started_ns else m
        except OSError:
            pass
    p = _path(root, index)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_whole(p, json.dumps({"folder": folder, "chunks_version": CODE_CHUNKS_VERSION, "filters": filters,
                               "files": files, "dirs": dirs}).encode())  # a reader never sees half a snapshot


def stale_reason(root: Path, index: str, folder: str, filters: dict) -> str:
    """Why the index of ``folder`` may not match the folder now ('' when it does)."""
    try:
        snap = json.loads(_path(root, index).read_text())
    except (OSError, ValueError):
        return "no snapshot of the files it was built from"
    if snap.get("folder") != folder:
        return "built from another folder"
    if snap.get("chunks_version") != CODE_CHUNKS_VERSION:
        return "built by another version of the code chunker"
    if snap.get("filters") != filters:
        return "built with other --include/--exclude/.gitignore filters"
    for d, m in snap.get("dirs", {}).items():
        try:
            if m is None or os.stat(d).st_mtime_ns != m:
                return f"a file was added, removed or renamed in {d}"
        except OSError:
            return f"{d} is gone"
    for f, sm in snap.get("files", {}).items():
        try:
            st = os.stat(f)
        except OSError:
            return f"{f} is gone"
        if sm is None or [st.st_size, st.st_mtime_ns] != sm:
            return f"{f} changed"
    return ""
