"""The e5 vocabulary's piece -> id look-up, mapped from the model cache rather than parsed at each load.

Why: building a dict of e5's 250,002 pieces costs ~0.08 s of CPU in every fresh process (split 0.02 s, dict
0.05 s), a third of a cold ``ragwb search``'s engine (issue 74: "the vocabulary mapped, not parsed"). A query is
a few words: a hash table written once at build time (``pieces.idx``, an open-addressing table of piece ids keyed
by the CRC-32 of the piece's UTF-8 bytes) answers its few hundred look-ups from the mapped file, each checked
against the piece's own bytes in ``vocab.bin``, so the table can only say "absent" or the true id. A process that
looks up many pieces (an ingest) builds the dict once after ``DICT_AFTER`` look-ups, the cost it always paid.
Both files are in the cache's manifest (rag/index/e5_cache.py): a damaged one is rebuilt, never read."""
from __future__ import annotations

import mmap
import struct
import zlib
from array import array
from pathlib import Path

TABLE = "pieces.idx"
MAGIC = b"E5PT\x01\x00\x00\x00"
DICT_AFTER = 100_000  # mapped look-ups (~1 us each) before the dict (~0.08 s to build) pays for itself


def build_table(blob: bytes) -> bytes:
    """The table file for ``vocab.bin`` (pieces in id order, NUL-separated): header, the pieces' start offsets
    (n + 1, the last one past the blob's end), then a power-of-two slot array of ids (-1: empty), linear probing."""
    pieces = blob.split(b"\0")
    n = len(pieces)
    size = 1 << max(4, (2 * n - 1).bit_length())  # under half full: short probe runs
    mask = size - 1
    offs = array("I", [0]) * (n + 1)
    slots = array("i", [-1]) * size
    pos = 0
    for i, b in enumerate(pieces):
        offs[i] = pos
        pos += len(b) + 1
        if b:
            h = zlib.crc32(b) & mask
            while slots[h] != -1:
                h = (h + 1) & mask
            slots[h] = i
    offs[n] = pos
    return MAGIC + struct.pack("<II", n, size) + offs.tobytes() + slots.tobytes()


def _map(path: Path) -> mmap.mmap:
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class PieceTable:
    """``dict.get`` over the mapped table (what the tokenizer calls); ids exactly as ``dict(zip(pieces, ids))``
    less the empty piece."""

    def __init__(self, folder: Path):
        self._blob = _map(folder / "vocab.bin")
        idx = _map(folder / TABLE)
        if idx[:8] != MAGIC:
            raise ValueError(f"{folder / TABLE}: not a piece table")
        n, size = struct.unpack_from("<II", idx, 8)
        mv = memoryview(idx)
        self._offs = mv[16:16 + 4 * (n + 1)].cast("I")
        self._slots = mv[16 + 4 * (n + 1):16 + 4 * (n + 1) + 4 * size].cast("i")
        if len(self._slots) != size or self._offs[n] != len(self._blob) + 1:
            raise ValueError(f"{folder / TABLE}: does not fit vocab.bin")
        self._mask, self.n = size - 1, n
        self._looked, self._dict = 0, None

    def as_dict(self) -> dict:
        if self._dict is None:
            by_id = self._blob[:].decode("utf-8").split("\0")
            d = dict(zip(by_id, range(len(by_id))))
            d.pop("", None)
            self._dict = d
        return self._dict

    def get(self, piece: str, default=None):
        if self._dict is not None:
            return self._dict.get(piece, default)
        self._looked += 1
        if self._looked > DICT_AFTER:
            return self.as_dict().get(piece, default)
        b = piece.encode("utf-8", "surrogatepass")  # a lone surrogate matches no piece (as in the dict)
        slots, offs, blob, mask = self._slots, self._offs, self._blob, self._mask
        h = zlib.crc32(b) & mask
        while True:
            i = slots[h]
            if i < 0:
                return default
            if blob[offs[i]:offs[i + 1] - 1] == b:
                return i
            h = (h + 1) & mask
