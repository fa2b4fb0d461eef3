"""A cold look-up's copy of an exact index: its tables as Arrow IPC files that a fresh process maps without
importing pylance.

Why: ``import lance`` costs ~0.5 s of CPU in a fresh process (pyarrow.dataset, which imports pandas: pyarrow's
``Expression._scalar(True)`` asks pandas whether ``True`` is array-like), more than the rest of a cold
``ragwb search`` together (issue 74). An exact index is read whole into memory anyway, so the same Arrow tables,
written once beside LanceDB, answer the next cold look-up in a few milliseconds.

Trust: LanceDB stays the store; a snapshot is a cache that proves it is current. Its name carries a *stamp*: the
manifests in each table's ``_versions/`` folder (every commit to a Lance table adds one; a clean-up removes some),
by name, size, modification time and inode (a table dropped and built again repeats the names), listed before the
tables were read. A snapshot is used only while the folders list exactly what they listed
then; anything else (a write, a clean-up, a layout this does not know, a file whose size or CRC-32 differs from what
its writer recorded, a missing one) reads LanceDB as before, and the reader writes the snapshot of what it read
for the next process."""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

# the tables an exact index is read from (page_vectors: an ANN index's, which has no snapshot but whose stamp
# still keys its in-process reader)
KINDS = ("chunks", "documents", "pages", "parents", "meta")
OPTIONAL = ("page_vectors",)
MAX_CHUNKS = 200_000  # past this an index is ANN-sized: no second copy of its vectors on disk


def folder(ws) -> Path:
    return ws.root / "cache" / "snapshots"


def stamp(ws, index: str) -> str | None:
    """What the index's tables hold now, as the Lance manifests that name their versions; None when a table's
    version folder cannot be listed (then only LanceDB can tell)."""
    parts = []
    for kind in KINDS + OPTIONAL:
        d = ws.dataset_path(f"{index}__{kind}") / "_versions"
        try:  # each manifest with its size, time and inode: a table dropped and built again repeats the names
            names = sorted(f"{e.name}/{st.st_size}/{st.st_mtime_ns}/{st.st_ino}"
                           for e in os.scandir(d) if e.name.endswith(".manifest") for st in (e.stat(),))
        except OSError:
            if kind in OPTIONAL:
                continue
            return None
        if not names:
            return None
        parts.append(f"{kind}:{','.join(names)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


DONE_MAX_BYTES = 4096  # a snapshot's .done holds a few [size, CRC] pairs


def _path(ws, index: str, st: str, kind: str) -> Path:
    return folder(ws) / f"{index}.{st}.{kind}.arrow"


def load(ws, index: str, st: str) -> dict | None:
    """{kind: Arrow table} and {"meta": dict} of the snapshot stamped ``st``, mapped, or None: no snapshot of the
    tables as they are now, or a file whose size or CRC-32 is not what its writer recorded (a damaged copy is never
    read as an index; LanceDB is read instead and the snapshot written again)."""
    from rag.safeio import open_regular, read_regular

    try:  # regular files only, never through a link, of the sizes their writer recorded (issue 82)
        sums = json.loads(read_regular(folder(ws) / f"{index}.{st}.done", DONE_MAX_BYTES))
    except (OSError, ValueError):
        return None
    import mmap

    import pyarrow as pa
    import pyarrow.ipc  # noqa: F401

    out: dict = {}
    try:
        for kind in KINDS[:-1]:
            want = sums.get(kind)
            if not (isinstance(want, list) and len(want) == 2 and all(isinstance(x, int) for x in want)):
                return None
            fd = open_regular(_path(ws, index, st, kind), want[0])
            try:
                if os.fstat(fd).st_size != want[0] or want[0] == 0:
                    return None
                buf = pa.py_buffer(mmap.mmap(fd, want[0], access=mmap.ACCESS_READ))  # mapped, as pa.memory_map
            finally:
                os.close(fd)
            if [buf.size, zlib.crc32(buf)] != want:
                return None
            t = pa.ipc.open_file(buf).read_all()
            md = t.schema.metadata or {}
            if md.get(b"ragwb.index") != index.encode() or md.get(b"ragwb.stamp") != st.encode():
                return None  # a file renamed or copied from elsewhere
            out[kind] = t
        out["meta"] = json.loads(out["chunks"].schema.metadata[b"ragwb.meta"])
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
    return out


def save(ws, index: str, st: str, meta: dict, tables: dict) -> bool:
    """Write the snapshot of ``tables`` (read from LanceDB after ``st`` was taken) and drop the index's older
    ones. A cache: a folder that cannot be written leaves LanceDB to answer, said by the False."""
    if tables["chunks"].num_rows > MAX_CHUNKS:
        return False
    import pyarrow as pa
    import pyarrow.ipc  # noqa: F401

    d = folder(ws)
    tag = f".{os.getpid()}.tmp"
    written, sums = [], {}
    try:
        d.mkdir(parents=True, exist_ok=True)
        for kind in KINDS[:-1]:
            t = tables[kind]
            md = dict(t.schema.metadata or {})
            md.update({b"ragwb.index": index.encode(), b"ragwb.stamp": st.encode()})
            if kind == "chunks":
                md[b"ragwb.meta"] = json.dumps(meta).encode()
            t = t.replace_schema_metadata(md)
            final = _path(ws, index, st, kind)
            tmp = final.with_name(final.name + tag)
            written.append(tmp)
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
                w.write_table(t)
            sums[kind] = _sum(tmp)
            os.replace(tmp, final)
        done = d / f"{index}.{st}.done"  # last: a snapshot is whole only once this exists, with its files' sums
        tmp = done.with_name(done.name + tag)
        written.append(tmp)
        tmp.write_text(json.dumps(sums))
        os.replace(tmp, done)
    except (OSError, pa.ArrowException):
        for p in written:
            p.unlink(missing_ok=True)
        return False
    for p in d.glob(f"{index}.*"):  # older stamps of this index (an open map of one survives its unlink)
        rest = p.name[len(index) + 1:].split(".")
        if len(rest[0]) == len(st) and rest[0] != st and (rest[-1] != "tmp" or not _alive(rest[-2])):
            p.unlink(missing_ok=True)
    return True


def _sum(path: Path) -> list[int]:
    """[size, CRC-32] of a file, read in 16 MB blocks (a 200,000-chunk snapshot is ~0.5 GB)."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            crc, size = zlib.crc32(block, crc), size + len(block)
    return [size, crc]


def _alive(pid: str) -> bool:
    """A temporary's writer is still running (a killed one's temporaries are removed by the next writer)."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def refresh(ws, index: str) -> bool:
    """The snapshot of an exact index as it stands (an ingest calls this last, under its writer lock): the first
    cold look-up after an ingest is as quick as the next. False: nothing written (an ANN index, a version folder
    that cannot be listed, a snapshot already current, or a folder that cannot be written)."""
    st = stamp(ws, index)
    if st is None or (folder(ws) / f"{index}.{st}.done").is_file():
        return False
    meta = ws.meta(index)
    if meta.get("vector_index", "exact") != "exact":
        return False
    return save(ws, index, st, meta, read_lance(ws, index))


def read_lance(ws, index: str, chunks=None) -> dict:
    """The tables a snapshot holds, read from LanceDB (``chunks``: that table already read)."""
    return {k: chunks if k == "chunks" and chunks is not None else ws.read_table(index, k).to_arrow()
            for k in KINDS[:-1]}
