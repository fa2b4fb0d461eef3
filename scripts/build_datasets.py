"""Derive the bundled gold sets in datasets/ from the raw files in ../shared/datasets.

Run once by maintainers (python scripts/build_datasets.py); the project never reads
../shared at run time. Output is deterministic.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import gzip
import io
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQUAD_ARTICLES = ["Normans", "1973_oil_crisis", "Packet_switching", "Harvard_University"]
XQUAD_ENTRIES = 12  # first N article entries (~60 paragraphs, ~300 questions per language)
DOCUGAMI_PDFS = ["2023 Q3 AAPL.pdf", "2023 Q3 NVDA.pdf", "2023 Q3 AMZN.pdf"]


def write_gz_json(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "datasets"))
    ap.add_argument("--out", default=str(ROOT / "datasets"))
    a = ap.parse_args()
    src, out = Path(a.shared), Path(a.out)

    with gzip.open(src / "squad2_dev_cs224n" / "dev-v2.0.json.gz") as f:
        squad = json.load(f)
    keep = [art for art in squad["data"] if art["title"] in SQUAD_ARTICLES]
    write_gz_json({"version": squad["version"], "data": keep}, out / "squad2" / "squad2-dev-subset.json.gz")
    for f in ("ATTRIBUTION.txt", "REPO_LICENSE_MIT.txt"):
        shutil.copy(src / "squad2_dev_cs224n" / f, out / "squad2" / f)
    shutil.copy(src / "xquad" / "CC-BY-SA4.0.txt", out / "squad2" / "CC-BY-SA4.0.txt")
    (out / "squad2" / "SUBSET.txt").write_text(
        f"Subset: articles {', '.join(SQUAD_ARTICLES)} of dev-v2.0.json (unchanged JSON records), "
        "derived by scripts/build_datasets.py. License: CC BY-SA 4.0.\n")

    for lang in ("en", "el", "ru"):
        with gzip.open(src / "xquad" / f"xquad.{lang}.json.gz") as f:
            x = json.load(f)
        write_gz_json({"version": x.get("version", "1.1"), "data": x["data"][:XQUAD_ENTRIES]},
                      out / "xquad" / f"xquad.{lang}.json.gz")
    for f in ("ATTRIBUTION.txt", "CC-BY-SA4.0.txt"):
        shutil.copy(src / "xquad" / f, out / "xquad" / f)
    (out / "xquad" / "SUBSET.txt").write_text(
        f"Subset: the first {XQUAD_ENTRIES} article entries of xquad.{{en,el,ru}}.json (parallel ids), "
        "derived by scripts/build_datasets.py. License: CC BY-SA 4.0.\n")

    dg = src / "docugami_sec10q"
    (out / "docugami" / "docs").mkdir(parents=True, exist_ok=True)
    for pdf in DOCUGAMI_PDFS:
        shutil.copy(dg / "docs" / pdf, out / "docugami" / "docs" / pdf)
    all_pdfs = sorted(p.name for p in (dg / "docs").glob("*.pdf"))
    raw = (dg / "qna_data.csv").read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(raw)))
    # keep questions whose glob, over ALL 20 filings, names only filings we ship
    kept = [r for r in rows if (m := [p for p in all_pdfs if fnmatch.fnmatch(p, r["Source Docs"])])
            and set(m) <= set(DOCUGAMI_PDFS)]
    with open(out / "docugami" / "qna_data.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(kept)
    for f in ("ATTRIBUTION.txt", "LICENSE_MIT.txt"):
        shutil.copy(dg / f, out / "docugami" / f)
    (out / "docugami" / "SUBSET.txt").write_text(
        f"Subset: {', '.join(DOCUGAMI_PDFS)} and the {len(kept)} questions of qna_data.csv whose source glob "
        "matches only these filings; derived by scripts/build_datasets.py. License: MIT.\n")
    print(f"squad2: {sum(len(p['qas']) for a in keep for p in a['paragraphs'])} questions; docugami: {len(kept)} questions")


if __name__ == "__main__":
    main()
