"""Where the e5 engine's built model lives, and how it proves itself at load (issue 73).

The cache folder follows the XDG base-directory spec: ``$RAGWB_CACHE``, else ``$XDG_CACHE_HOME/ragwb`` when that is
an absolute path (the spec says a relative one is ignored), else ``~/.cache/ragwb`` with the home folder taken from
the password database when ``HOME`` is empty or relative; a folder that cannot be made or written falls back to a
temporary one, said once with the variable to set.

A build writes ``manifest.json`` last: each file's size and sha256 (big files: a digest of sampled blocks, the
first, the last and 16 between), and a canary embedding. A load checks sizes and digests (a few milliseconds) and
the canary's cosine to the stored vector; anything damaged (a truncated model, a shifted vocabulary, zeroed
weights) is rebuilt with one line that says so, never loaded silently. Temporaries of a build that was killed are
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
FILES = ("e5-small.int8.onnx", "word.npy", "vocab.bin", "pieces.idx", "vocab.json", "scores.npy")
WHOLE_UNDER = 8 << 20  # files smaller than this are hashed whole; bigger ones by sampled blocks
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


def file_digest(path: Path) -> tuple[int, str]:
    """(size, sha256): whole for small files, else of the first, the last and SAMPLES evenly spaced blocks."""
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size < WHOLE_UNDER:
            h.update(f.read())
        else:
            for k in range(SAMPLES + 2):
                f.seek(min(size - BLOCK, k * (size - BLOCK) // (SAMPLES + 1)))
                h.update(f.read(BLOCK))
    return size, h.hexdigest()


def write_manifest(folder: Path, canary: list[float]) -> None:
    """Written last at build time: each file's size and digest, and the canary vector."""
    data = {"files": {n: dict(zip(("size", "sha256"), file_digest(folder / n))) for n in FILES},
            "canary": [round(float(x), 7) for x in canary]}
    tmp = folder / f"{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, folder / MANIFEST)


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
