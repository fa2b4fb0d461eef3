"""Compare the PDF parsers on a folder of PDFs: time, pages, and pages moved.

    python scripts/compare_pdf_parsers.py FOLDER

For each file both parsers read, a page "moved" when pdfium's page i shares the most words with a pypdf page
other than i (word-set Jaccard); "text agreement" is the mean Jaccard of page i with page i. The evidence
matching of docs/datasets.md then locates gold text on the same pages. Measured for issue 74 (docs/performance.md).
"""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def parse(folder: Path, parser: str) -> tuple[dict, float, dict]:
    os.environ["RAGWB_PDF_PARSER"] = parser
    from rag.ingest.readers import ImportError_, read_pdf_pages

    out, failed = {}, {}
    t0 = time.perf_counter()
    for f in sorted(folder.glob("*.pdf")):
        try:
            out[f.name] = read_pdf_pages(f)
        except ImportError_ as e:
            failed[f.name] = str(e).split(": ", 1)[-1][:100]
    return out, time.perf_counter() - t0, failed


def main() -> None:
    folder = Path(sys.argv[1])
    pdfium, t_pdfium, f_pdfium = parse(folder, "pdfium")
    pypdf, t_pypdf, f_pypdf = parse(folder, "pypdf")
    moved = pages = 0
    agree = []
    for name in sorted(set(pdfium) & set(pypdf)):
        a, b = pdfium[name], pypdf[name]
        if len(a) != len(b):
            print(f"{name}: {len(a)} pages (pdfium) vs {len(b)} (pypdf)")
        wb = [words(p) for p in b]
        for i, p in enumerate(a):
            wa = words(p)
            sims = [len(wa & w) / max(len(wa | w), 1) for w in wb]
            pages += 1
            if i < len(sims):
                agree.append(sims[i])
            if wa and max(range(len(sims)), key=sims.__getitem__) != i and sims[i] < max(sims):
                moved += 1
                print(f"{name} page {i}: best pypdf page {max(range(len(sims)), key=sims.__getitem__)}")
    print(f"pdfium {t_pdfium:.2f}s for {len(pdfium)} files; pypdf {t_pypdf:.2f}s for {len(pypdf)} files "
          f"({t_pypdf / max(t_pdfium, 1e-9):.1f}x)")
    for parser, failed in (("pdfium", f_pdfium), ("pypdf", f_pypdf)):
        for name, why in failed.items():
            print(f"{parser} could not read {name}: {why}")
    print(f"pages compared {pages}, moved {moved}; mean word agreement page i vs page i "
          f"{sum(agree) / max(len(agree), 1):.3f}")


if __name__ == "__main__":
    main()
