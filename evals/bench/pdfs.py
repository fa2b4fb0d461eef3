"""Real PDF files written without a PDF library: one Helvetica text page per list of lines, a blank page for an empty
list. pdfium and pypdf read them back as they read filings (line breaks, hyphens at line ends). The benches write
folders of them; the tests too (tests/pdfgen.py)."""
from __future__ import annotations

import textwrap
from pathlib import Path


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(path: Path, pages: list[list[str]]) -> Path:
    objs: list[bytes] = []  # object i+1
    n = len(pages)
    page_ids = [4 + 2 * i for i in range(n)]
    objs.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objs.append(f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}] /Count {n} >>".encode())
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    for i, lines in enumerate(pages):
        content = ""
        if lines:
            content = "BT /F1 11 Tf 14 TL 72 720 Td " + " ".join(f"({_esc(ln)}) Tj T*" for ln in lines) + " ET"
        data = content.encode("cp1252", errors="replace")  # Helvetica's WinAnsi: other characters become '?'
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                    f"/Contents {page_ids[i] + 1} 0 R >>".encode())
        objs.append(b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream")
    return _write_pdf(path, objs)


def _write_pdf(path: Path, objs: list[bytes]) -> Path:
    """The objects (object i+1 is ``objs[i]``, the catalog first) as a PDF file with its cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for k, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % k + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    Path(path).write_bytes(bytes(out))
    return Path(path)


def text_pages(text: str, width: int = 95, lines_per_page: int = 48) -> list[list[str]]:
    """Text laid out as pages of wrapped lines (paragraphs kept apart by a blank line)."""
    lines: list[str] = []
    for para in text.split("\n"):
        lines.extend(textwrap.wrap(para, width) or [""])
    return [lines[i:i + lines_per_page] for i in range(0, len(lines), lines_per_page)] or [[]]


def make_heavy_pdf(path: Path, stream_mb: int) -> Path:
    """One page whose content stream inflates to ``stream_mb`` MB of text operators (a few KB on disk): pdfium
    spends ~0.5 s and ~100 MB a stream MB on it. The hostile file of the seventh sweep (issue 82): a worker busy
    for seconds, or past its memory bound."""
    import zlib

    unit = b"(abcdefgh ijk) Tj T* "
    data = b"BT /F1 11 Tf 14 TL 72 720 Td " + unit * (stream_mb * 1_000_000 // len(unit)) + b" ET"
    comp = zlib.compress(data, 9)
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(comp) + comp + b"\nendstream"]
    return _write_pdf(path, objs)
