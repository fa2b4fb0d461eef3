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
import random
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SQUAD_SEED = 20261123
SQUAD_SAMPLE = (600, 600)  # answerable, unanswerable questions kept; the corpus keeps every paragraph
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
    ap.add_argument("--no-vectors", action="store_true", help="skip the shipped parsed pages and e5 vectors")
    ap.add_argument("--vectors-only", nargs="+", metavar="SET", default=None,
                    help="only (re)build the shipped vectors of these bundled sets, keeping the others' (no "
                         "source data read)")
    a = ap.parse_args()
    src, out = Path(a.shared), Path(a.out)
    if a.vectors_only:
        build_shipped(out, a.vectors_only)
        return

    with gzip.open(src / "squad2_dev_cs224n" / "dev-v2.0.json.gz") as f:
        squad = json.load(f)
    # the whole corpus (16 articles, 646 paragraphs: retrieval is not trivial) and a seeded,
    # balanced sample of its questions (so the main job stays quick)
    qas = [(qa["id"], bool(qa.get("is_impossible"))) for art in squad["data"] for p in art["paragraphs"]
           for qa in p["qas"]]
    rng = random.Random(SQUAD_SEED)
    pick = set(rng.sample([i for i, imp in qas if not imp], SQUAD_SAMPLE[0]))
    pick |= set(rng.sample([i for i, imp in qas if imp], SQUAD_SAMPLE[1]))
    keep = [{**art, "paragraphs": [{**p, "qas": [qa for qa in p["qas"] if qa["id"] in pick]}
                                   for p in art["paragraphs"]]} for art in squad["data"]]
    write_gz_json({"version": squad["version"], "data": keep}, out / "squad2" / "squad2-dev-subset.json.gz")
    for f in ("ATTRIBUTION.txt", "REPO_LICENSE_MIT.txt"):
        shutil.copy(src / "squad2_dev_cs224n" / f, out / "squad2" / f)
    shutil.copy(src / "xquad" / "CC-BY-SA4.0.txt", out / "squad2" / "CC-BY-SA4.0.txt")
    n_par = sum(len(a["paragraphs"]) for a in keep)
    (out / "squad2" / "SUBSET.txt").write_text(
        f"Subset: all {len(keep)} articles and {n_par} paragraphs of dev-v2.0.json (the CS224N half of the "
        f"official dev set) as the corpus, with a seeded sample (seed {SQUAD_SEED}) of {SQUAD_SAMPLE[0]} "
        f"answerable and {SQUAD_SAMPLE[1]} unanswerable questions (records unchanged); derived by "
        "scripts/build_datasets.py. License: CC BY-SA 4.0.\n")

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
    build_mtrag(src, out)
    if not a.no_vectors:
        build_shipped(out)


def build_mtrag(src: Path, out: Path) -> None:
    """MTRAG govt and ClapNQ subsets, unchanged records, gzipped; attribution kept, licenses noted."""
    for sub in ("govt", "clapnq"):
        d = out / "mtrag" / sub
        d.mkdir(parents=True, exist_ok=True)
        for f in ("conversations.jsonl", "passages.jsonl"):
            data = (src / "mtrag" / sub / f).read_bytes()
            with open(d / f"{f}.gz", "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as g:
                g.write(data)
        for f in ("ATTRIBUTION.txt", "stats.json"):
            shutil.copy(src / "mtrag" / sub / f, d / f)
        (d / "LICENSE-NOTICE.txt").write_text(
            "MTRAG data (IBM/mt-rag-benchmark) is distributed under the Apache License, Version 2.0\n"
            "(https://www.apache.org/licenses/LICENSE-2.0). See ATTRIBUTION.txt for sources and commits.\n"
            "Bundled unchanged (gzipped) by scripts/build_datasets.py as RAG Workbench's mtrag-" + sub + " set.\n")
    (out / "mtrag" / "clapnq" / "CC-BY-SA-3.0-NOTICE.txt").write_text(
        "The ClapNQ passages are Wikipedia text (via Natural Questions / ClapNQ). Wikipedia text is licensed\n"
        "under the Creative Commons Attribution-ShareAlike 3.0 Unported License (CC BY-SA 3.0):\n"
        "https://creativecommons.org/licenses/by-sa/3.0/ . Attribution: the Wikipedia contributors of each\n"
        "article named in the passage titles. Changes: passages excerpted by ClapNQ/MTRAG; none here.\n"
        "Any redistribution of these passages must keep this notice and share alike.\n")


SHIPPED_VECTOR_SETS = ("squad2", "xquad-en", "xquad-el", "xquad-ru", "docugami", "mtrag-govt", "mtrag-clapnq",
                       "code-boltons")


def build_shipped(out: Path, only: list[str] | None = None) -> None:
    """Parsed pages of the bundled PDFs and the e5 vectors of every bundled chunk and question (turns and
    their rewrites for the conversation sets), so a fresh clone parses and embeds nothing (rag/index/shipped.py),
    the conversation sets included. Reproducible: same inputs, same files. ``only``: just these sets."""
    import os
    import tempfile

    os.environ["RAGWB_DATASETS"] = str(out)
    from rag.ingest.readers import ParseCache
    from rag.ingest.corpora import load_bundled
    from rag.index.embedders import get_embedder
    from rag.index.workspace import IndexConfig, Workspace
    from rag.index.shipped import MANIFEST, write_vectors

    parsed = out / "parsed"
    man = {}
    if only:
        man = json.loads((out / "vectors" / MANIFEST).read_text())
        # the sets rebuilt leave the manifest first: an ingest would otherwise seed their old vectors into the
        # build's cache, and the new file would carry every stale vector beside the new ones
        for name in only:
            man.pop(name, None)
        (out / "vectors" / MANIFEST).write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
    else:
        shutil.rmtree(parsed, ignore_errors=True)
    for name in only or SHIPPED_VECTOR_SETS:
        with tempfile.TemporaryDirectory() as tmp:
            cache = ParseCache(Path(tmp) / "parsed", shipped=Path(tmp) / "none")
            ds = load_bundled(name, cache, progress=True)
            for f in (Path(tmp) / "parsed").rglob("*.json.gz"):
                parsed.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, parsed / f.name)
            ws = Workspace(Path(tmp) / "ws")
            cfg = IndexConfig()
            ws.ingest(ds, cfg, progress=True)
            queries = [q.text for q in ds.questions] + [q.rewrite for q in ds.questions if q.rewrite]
            ws.embedding_cache.embed(get_embedder(cfg.embedder), cfg.embedder.key, list(dict.fromkeys(queries)),
                                     "query")
            entry = write_vectors(ws.embedding_cache.rows(), out / "vectors" / f"{name}.e5.parquet")
            man[name] = {**entry, "embedder_key": cfg.embedder.key, "index_config_hash": cfg.hash}
            print(f"{name}: {entry['rows']} vectors")
    (out / "vectors" / MANIFEST).write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
