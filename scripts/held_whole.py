"""How many implementations of a code folder lie whole in one chunk (docs/strategies.md, "Code corpora").

An implementation is a function or method with a body; "whole" means one chunk (default chunking) holds it from its
own doc comment to its last line (joined overload signatures above it not required); "fits" means that range is at
most the 512 tokens e5 reads. The share of those that fit is the ceiling of span evidence recall for `chunks`.

    python scripts/held_whole.py rxjs/src --suffix .ts
    python scripts/held_whole.py /tmp/cobra-set/corpus --suffix .go
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rag.ingest.chunking import ChunkConfig, chunk_document
from rag.ingest.code import all_defs, is_stub
from rag.ingest.code.docs import doc_block, leading_start
from rag.ingest.readers import ImportError_, load_code_file
from rag.tokens import E5_WINDOW, e5_tokens


def held_whole(root: Path, suffixes: tuple[str, ...]) -> dict:
    cfg = ChunkConfig()
    total = fit = whole = whole_fit = chunks = 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or not p.name.endswith(suffixes) or is_stub(p) or p.name.endswith("_test.go"):
            continue
        rel = p.relative_to(root).as_posix()
        try:
            doc = load_code_file(p, rel, "en")
        except ImportError_:  # skipped as the ingest skips it (minified or generated: jsoup's EntitiesData.java)
            continue
        got = chunk_document(doc, cfg)[0]
        chunks += len(got)
        spans = [(c.line_start, c.line_end) for c in got]
        lines = doc.text.split("\n")
        for d in all_defs(doc.code_parse.defs if doc.code_parse else []):
            if d.kind not in ("function", "method") or d.children:
                continue
            body = "\n".join(lines[d.first:d.last + 1])
            if "{" not in body and ":" not in body:  # a bodiless signature
                continue
            head = d.head if d.head >= 0 else d.first
            # from its doc as the language's doc tool reads it (never the chunker's own attachment: a check of the
            # chunker that used it read 99.4% held whole while jsoup's docs were split from their methods)
            block = doc_block(lines, leading_start(lines, head, -1), head, doc.code_language)
            start = next((k for k in range(head - 1, -1, -1) if lines[k] == block[0]), head) if block else head
            first = start + 1  # 1-based (no doc: its own first line, decorators in)
            last = d.last + 1
            fits = e5_tokens(["\n".join(lines[first - 1:last])])[0] <= E5_WINDOW
            held = any(a <= first and last <= b for a, b in spans)
            total += 1
            fit += fits
            whole += held
            whole_fit += held and fits
    return {"chunks": chunks, "implementations": total, "fit": fit, "whole": whole / max(total, 1),
            "whole_of_fit": whole_fit / max(fit, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--suffix", nargs="+", default=[".py", ".ts", ".go"])
    a = ap.parse_args()
    f = held_whole(a.folder, tuple(a.suffix))
    print(f"{a.folder}: {f['chunks']:,} chunks, {f['implementations']:,} implementations, {f['fit']:,} fit e5's "
          f"window; held whole: {f['whole']:.1%} of all, {f['whole_of_fit']:.1%} of those that fit")


if __name__ == "__main__":
    main()
