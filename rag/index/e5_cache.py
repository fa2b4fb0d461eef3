"""Where the e5 engine's built model lives, and how it proves itself at load (issue 73).

The cache folder follows the XDG base-directory spec: ``$RAGWB_CACHE``, else ``$XDG_CACHE_HOME/ragwb`` when that is
an absolute path (the spec says a relative one is ignored), else ``~/.cache/ragwb`` with the home folder taken from
the password database when ``HOME`` is empty or relative; a folder that cannot be made or written falls back to a
temporary one, said once with the variable to set.

A build writes ``manifest.json`` last: each file's size and sha256, and a canary embedding. Every byte is covered
(issue 82: 30 one-bit flips between sampled blocks of the model passed, and every vector came out NaN): the files a
load reads whole (the 22 MB int8 model, the vocabulary, its table, the scores) are hashed whole at load (~20 ms);
the 384 MB word table, memory-mapped and read a row at a time, carries a CRC-32 per row (``word.crc``, hashed whole)
and each row is checked the first time a process gathers it (``RowCheck``), so a changed row is found before it
enters a vector, never after; its size and sampled blocks are checked at load too. A canary whose cosine is not a
finite number at or above the bound fails. Anything damaged is rebuilt with one line that says so, never loaded
silently; a damaged cache in a folder that cannot be written is rebuilt in a temporary folder, said once.
Temporaries of a build that was killed are
removed by the next build (it holds the folder's lock, so every temporary left there is stale).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"
FILES = ("e5-small.int8.onnx", "word.npy", "word.crc", "vocab.bin", "pieces.idx", "vocab.json", "scores.npy")
SAMPLED = ("word.npy",)  # read by rows at use, each row checked against word.crc: hashed by sampled blocks at load
BLOCK, SAMPLES = 1 << 16, 16
CANARY = "passage: The canary checks that the cached model still embeds as it did when it was built."
CANARY_MIN_COSINE = 0.9999  # the same model on the same machine gives the same vector; zeroed weights gave 0.993
_WARNED: set = set()


def _say(line: str) -> None:
    if line not in _WARNED:
        _WARNED.add(line)
        print(f"ragwb: {line}", file=sys.stderr, flush=True)


def _home() -> Path | None:
    home = os.environ.get("HOME", "")
    if home and os.path.isabs(home):
        return Path(home)
    try:  # HOME empty or relative: the account's own home, as the shell would give it
        import pwd

        pw = pwd.getpwuid(os.getuid()).pw_dir
        return Path(pw) if pw and os.path.isabs(pw) else None
    except (ImportError, KeyError, OSError):
        return None


def _usable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


def cache_root() -> Path:
    """The e5 cache folder (``.../e5-onnx``), made and writable, by the XDG rules above."""
    own = os.environ.get("RAGWB_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if own:
        root, var = Path(own).expanduser().absolute() / "e5-onnx", "RAGWB_CACHE"
    elif xdg and os.path.isabs(xdg):
        root, var = Path(xdg) / "ragwb" / "e5-onnx", "XDG_CACHE_HOME"
    else:
        home = _home()
        root, var = (home / ".cache" / "ragwb" / "e5-onnx" if home else None), "HOME"
    if root is not None and _usable(root):
        return root
    fallback = Path(tempfile.gettempdir()) / f"ragwb-cache-{os.getuid()}" / "e5-onnx"
    if not _usable(fallback):
        raise RuntimeError(f"e5 onnx: no usable cache folder ({root} nor {fallback}); set RAGWB_CACHE to a "
                           "writable folder")
    _say(f"e5 onnx: the cache folder {root} cannot be written (from {var}); using {fallback} this time: set "
         "RAGWB_CACHE to a writable folder to keep the built model between runs")
    return fallback


def weights_digest(path: Path) -> str:
    """sha256 of the weights, remembered by (size, mtime) so a load does not hash 70 MB each time."""
    st = path.stat()
    memo = cache_root() / "digests.json"
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    known[key] = h.hexdigest()
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known))
    os.replace(tmp, memo)
    return known[key]


def file_digest(path: Path) -> tuple[int, str]:
    """(size, sha256): of every byte, except for the word table (``SAMPLED``: the first, the last and SAMPLES evenly
    spaced blocks; its every row is checked by its CRC when first used)."""
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if path.name not in SAMPLED or size < BLOCK * (SAMPLES + 2):
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        else:
            for k in range(SAMPLES + 2):
                f.seek(min(size - BLOCK, k * (size - BLOCK) // (SAMPLES + 1)))
                h.update(f.read(BLOCK))
    return size, h.hexdigest()


def write_manifest(folder: Path, canary: list[float]) -> None:
    """Written last at build time: each file's size and digest, and the canary vector."""
    data = {"files": {n: dict(zip(("size", "sha256"), file_digest(folder / n))) for n in FILES},
            "canary": [round(float(x), 7) for x in canary]}
    from rag.safeio import write_whole

    write_whole(folder / MANIFEST, json.dumps(data).encode())


def check(folder: Path) -> list[str]:
    """What is wrong with a built cache folder ([] when every file matches its manifest)."""
    try:
        man = json.loads((folder / MANIFEST).read_text())
        files = man["files"]
    except FileNotFoundError:
        return ["no manifest (a build that did not finish, or one made before the check)"]
    except (OSError, ValueError, KeyError, TypeError):
        return ["its manifest is damaged"]
    bad = []
    for name in FILES:
        want = files.get(name) if isinstance(files, dict) else None
        path = folder / name
        try:
            if not isinstance(want, dict):
                bad.append(f"{name}: not in the manifest")
            elif path.stat().st_size != want.get("size"):
                bad.append(f"{name}: {path.stat().st_size:,} bytes where {want.get('size')} were built")
            elif file_digest(path)[1] != want.get("sha256"):
                bad.append(f"{name}: its content changed since it was built")
        except OSError as e:
            bad.append(f"{name}: {e.strerror or e}")
    return bad


def write_row_crcs(words_npy: Path, out: Path) -> None:
    """CRC-32 of each row of the saved word table (uint32), written whole at ``out`` (``word.crc``)."""
    import zlib

    import numpy as np

    from rag.safeio import write_whole

    words = np.load(words_npy, mmap_mode="r")
    crcs = np.array([zlib.crc32(memoryview(np.ascontiguousarray(words[i]))) for i in range(len(words))], np.uint32)
    write_whole(out, crcs.tobytes())


class RowCheck:
    """Each row of the memory-mapped word table checked against its CRC the first time this process gathers it
    (a query touches a few dozen rows; an ingest ~20,000 distinct ones, ~20 ms in all). A changed row raises
    ``DamagedCache`` before it enters any vector, and the cache's manifest is removed so the next load rebuilds it."""

    def __init__(self, words, crc_path: Path):
        import numpy as np

        self.words, self.folder = words, crc_path.parent
        try:
            self.crc = np.fromfile(crc_path, np.uint32)
        except (OSError, ValueError) as e:
            raise DamagedCache(f"e5 onnx: the word table's checksums {crc_path} could not be read ({e})") from e
        if len(self.crc) != len(words):
            raise DamagedCache(f"{crc_path.name}: {len(self.crc):,} row checksums for {len(words):,} rows")
        self.ok = np.zeros(len(words), bool)

    def rows(self, ids) -> None:
        import zlib

        import numpy as np

        ids = np.asarray(ids).ravel()
        todo = np.unique(ids[~self.ok[ids]])
        for i in todo.tolist():
            if zlib.crc32(memoryview(np.ascontiguousarray(self.words[i]))) != int(self.crc[i]):
                try:
                    (self.folder / MANIFEST).unlink()  # the next load rebuilds the set, said then
                except OSError:
                    pass
                raise DamagedCache(f"e5 onnx: row {i:,} of the word table in {self.folder} changed since it was built "
                                   "(its CRC does not match): nothing was embedded from it; the cache is rebuilt at "
                                   "the next start (run the command again)")
            self.ok[i] = True


class DamagedCache(RuntimeError):
    """The e5 model cache failed a check at use (a word-table row): said in one line, rebuilt at the next load."""


def spare_for(out: Path, why: str, err: OSError) -> Path:
    """Where a cache set goes when its folder cannot be written (a read-only copy, another account's folder): the
    same name under this account's temporary cache, said once. Any other OSError is raised again."""
    import errno

    if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        raise err
    spare = Path(tempfile.gettempdir()) / f"ragwb-cache-{os.getuid()}" / "e5-onnx" / out.parent.name / out.name
    _say(f"e5 onnx: the model cache {out.parent} " + (f"failed its check ({why}) and " if why else "")
         + f"cannot be written ({err.strerror or err}): using {spare.parent} this time (set RAGWB_CACHE to a "
         "writable folder to keep it)")
    return spare


def canary_of(folder: Path) -> list[float] | None:
    try:
        c = json.loads((folder / MANIFEST).read_text()).get("canary")
        return c if isinstance(c, list) and c and all(isinstance(x, (int, float)) for x in c) else None
    except (OSError, ValueError, AttributeError):
        return None


_TEMP = re.compile(r"\.\d+\.(onnx|npy|bin|idx|json|tmp)$")


def clear_for_build(folder: Path) -> list[str]:
    """Under the folder's build lock: every temporary left by a killed build (its pid in the name) and every
    built file (a damaged set is rebuilt whole) removed. Returns the temporaries' names."""
    stale = []
    for p in folder.iterdir() if folder.is_dir() else []:
        if _TEMP.search(p.name):
            stale.append(p.name)
            p.unlink(missing_ok=True)
        elif p.name in FILES or p.name == MANIFEST:
            p.unlink(missing_ok=True)
    return stale
