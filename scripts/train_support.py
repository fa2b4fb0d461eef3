"""Train the offline support scorer (evals/score/support.py) on human labels, seeded and reproducible.

Data (read only here, never at run time):
  * ExpertQA rand_val (MIT): claims with their cited evidence; Complete = supported (1),
    Partial/Incomplete = not fully supported (0). Its questions are split (seeded): 30% are held out
    of training entirely and shipped as datasets/support/expertqa_agreement.jsonl.gz, the set
    `ragwb agreement` checks judges against; the other 70% train.
  * RAGTruth QA slice (MIT; MS MARCO passages: never shipped): answer sentences, unsupported = 0.
Evaluation: 5-fold cross-validation grouped by question (no question in both train and test), for
each source separately and, for RAGTruth, at answer level (an answer's score = its weakest sentence).
Then the final model is fitted on everything and written to evals/score/support_model.json.

    python scripts/train_support.py                      # full training (reads ../shared)
    python scripts/train_support.py --slice --out X.json # the shipped claims only (tests)
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evals.score.agreement import auroc  # noqa: E402
from evals.score.support import FEATURES, features  # noqa: E402
from rag.textproc import analyze  # noqa: E402

SHIPPED = ROOT / "datasets" / "support" / "expertqa_agreement.jsonl.gz"
HOLDOUT = 0.3


def expertqa_claims(path: Path) -> list[dict]:
    out = []
    for line in gzip.open(path, "rt", encoding="utf-8"):
        r = json.loads(line)
        for sysname, a in sorted(r["answers"].items()):
            for k, c in enumerate(a.get("claims") or []):
                if c.get("support") not in ("Complete", "Partial", "Incomplete") or not c.get("evidence"):
                    continue
                ev = [re.sub(r"^\[\d+\][^\n]*\n+", "", e, count=1).strip() for e in c["evidence"]]
                ev = [e for e in ev if e]
                if ev:
                    out.append({"question": r["question"], "system": sysname, "claim": c["claim_string"],
                                "evidence": ev, "support": c["support"], "label": int(c["support"] == "Complete")})
    return out


def ragtruth(root: Path) -> list[dict]:
    items = {}
    for line in open(root / "items.jsonl", encoding="utf-8"):
        it = json.loads(line)
        passages = [re.sub(r"^passage \d+:", "", p).strip() for p in re.split(r"\n\n(?=passage \d+:)", it["context"])]
        items[it["id"]] = (it, passages)
    out = []
    for line in open(root / "sentences.jsonl", encoding="utf-8"):
        s = json.loads(line)
        it, passages = items[s["item_id"]]
        out.append({"question": "rt:" + str(it["source_id"]), "item": s["item_id"], "claim": s["sentence"],
                    "evidence": passages, "label": int(not s["unsupported"]), "hallucinated": bool(it["hallucinated"])})
    return out


_AUX = re.compile(r"\b(is|are|was|were|has|have|had|can|will|would|does|did|should|may)\b")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_CAP = re.compile(r"(?<=\s)([A-Z][a-z]{2,})")


def perturb(row: dict, rng: np.random.Generator, names: list[str]) -> list[dict]:
    """Unsupported variants of a supported claim (label 0): a number changed, a negation added, a
    name swapped for one its evidence does not hold. They teach the model what a close hallucination
    looks like; they are used for training only, never for the reported cross-validated figures."""
    out, claim, ev = [], row["claim"], " ".join(row["evidence"])
    nums = [m for m in _NUMBER.finditer(claim)]
    if nums:
        m = nums[int(rng.integers(len(nums)))]
        digits = m.group().replace(",", "")
        try:
            v = float(digits)
        except ValueError:
            v = None
        if v is not None:
            new = f"{v * float(rng.choice([0.5, 0.8, 1.3, 2.0, 3.0])) + float(rng.integers(1, 9)):,.0f}"
            if new not in ev:
                out.append(claim[:m.start()] + new + claim[m.end():])
    aux = _AUX.search(claim)
    if aux and " not " not in claim and "n't" not in claim:
        out.append(claim[:aux.end()] + " not" + claim[aux.end():])
    caps = [m for m in _CAP.finditer(claim) if m.group() in ev]
    if caps and names:
        m = caps[int(rng.integers(len(caps)))]
        for _ in range(5):
            new = names[int(rng.integers(len(names)))]
            if new not in ev and new != m.group():
                out.append(claim[:m.start()] + new + claim[m.end():])
                break
    return [{**row, "claim": c, "label": 0, "synthetic": True} for c in out]


def idf_table(min_df: int = 2) -> tuple[dict, float]:
    """IDF from the bundled SQuAD corpus (646 Wikipedia paragraphs): rare terms weigh more."""
    raw = json.loads(gzip.open(ROOT / "datasets" / "squad2" / "squad2-dev-subset.json.gz").read())
    paras = [p["context"] for a in raw["data"] for p in a["paragraphs"]]
    df = Counter()
    for p in paras:
        df.update(set(analyze(p, "en")))
    n = len(paras)
    idf = {t: round(math.log(1 + n / (1 + c)), 4) for t, c in sorted(df.items()) if c >= min_df}
    return idf, round(math.log(1 + n), 4)


# the direction each feature may push (1 up, -1 down, 0 free): more coverage never lowers support,
# a missing number or name never raises it. A monotone model extrapolates sanely to statements
# unlike the training data (an unrelated claim scores low, not "somewhere near the threshold").
SIGNS = {"cov_idf": 1, "cov": 1, "best_window_cov": 1, "bigram_cov": 1, "num_missing": -1, "num_any_missing": -1,
         "ent_cov": 1, "neg_mismatch": -1, "emb_best": 1, "emb_margin": 1, "log_len": 0, "uncovered_idf": -1,
         "uncovered_n": -1, "longest_run": 1, "best_window_plain": 1, "min_clause_cov": 1, "max_uncovered_idf": -1}


def fit(X: np.ndarray, y: np.ndarray, seed: int, C: float, sw: np.ndarray | None = None):
    """Class-balanced, L2-regularised logistic regression with sign-constrained coefficients
    (scipy L-BFGS-B; deterministic: no randomness, ``seed`` kept for the record)."""
    from scipy.optimize import minimize

    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale == 0] = 1.0
    Z = (X - mean) / scale
    sw = np.ones(len(y)) if sw is None else sw
    w = sw * np.where(y == 1, sw.sum() / (2 * max(1, sw[y == 1].sum())), sw.sum() / (2 * max(1, sw[y == 0].sum())))
    s = 2 * y - 1
    lam = 1.0 / (2 * C)

    def loss(theta):
        coef, b = theta[:-1], theta[-1]
        m = s * (Z @ coef + b)
        l = np.logaddexp(0, -m)
        g = -w * s * (1 / (1 + np.exp(m)))
        return float((w * l).sum() + lam * coef @ coef), np.append(Z.T @ g + 2 * lam * coef, g.sum())

    bounds = [((0, None) if SIGNS[f] > 0 else (None, 0) if SIGNS[f] < 0 else (None, None)) for f in FEATURES]
    res = minimize(loss, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B", bounds=bounds + [(None, None)],
                   options={"maxiter": 5000, "gtol": 1e-9})
    return mean, scale, res.x[:-1], float(res.x[-1])


def predict(X, mean, scale, coef, intercept):
    return 1 / (1 + np.exp(-(((X - mean) / scale) @ coef + intercept)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "datasets" / "support_dev"))
    ap.add_argument("--out", default=str(ROOT / "evals" / "score" / "support_model.json"))
    ap.add_argument("--slice", action="store_true", help="train on the shipped ExpertQA claims only (no ../shared)")
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--C", type=float, default=0.5)
    ap.add_argument("--no-e5", action="store_true", help="lexical features only (e5 features fixed at 0)")
    ap.add_argument("--no-augment", action="store_true", help="no synthetic perturbed negatives")
    ap.add_argument("--synthetic-weight", type=float, default=0.1, help="weight of each synthetic negative (0.1)")
    ap.add_argument("--workspace", default=str(ROOT / "results"), help="embedding cache for the e5 features")
    a = ap.parse_args()

    if a.slice:
        eq = [json.loads(x) for x in gzip.open(SHIPPED, "rt", encoding="utf-8")]
        rt = []
    else:
        eq_all = expertqa_claims(Path(a.shared) / "expertqa" / "rand_val.jsonl.gz")
        qs = sorted({c["question"] for c in eq_all})
        held = set(np.random.default_rng(a.seed).permutation(qs)[:round(HOLDOUT * len(qs))].tolist())
        agreement = [c for c in eq_all if c["question"] in held]
        eq = [c for c in eq_all if c["question"] not in held]
        SHIPPED.parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(SHIPPED, "wb", mtime=0) as f:
            f.write("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in agreement).encode())
        import shutil
        for f in ("ATTRIBUTION.txt", "LICENSE_MIT.txt"):
            shutil.copy(Path(a.shared) / "expertqa" / f, SHIPPED.parent / f)
        (SHIPPED.parent / "SUBSET.txt").write_text(
            f"expertqa_agreement.jsonl.gz: the claims (with their cited evidence passages, URL line removed) of "
            f"{len(held)} of the {len(qs)} questions of ExpertQA rand_val, held out of the support model's training "
            f"(seed {a.seed}); support Complete = label 1, Partial/Incomplete = 0. Derived by "
            "scripts/train_support.py. License: MIT (LICENSE_MIT.txt).\n")
        rt = ragtruth(Path(a.shared) / "ragtruth_qa")
    idf, unk = idf_table()
    model = {"idf": idf, "idf_unknown": unk, "mean": [0.0] * len(FEATURES), "scale": [1.0] * len(FEATURES),
             "coef": [0.0] * len(FEATURES), "intercept": 0.0}
    embed = None
    if not a.no_e5:
        from rag.index.embedders import EmbedderConfig, EmbeddingCache, get_embedder

        cfg = EmbedderConfig("e5")
        emb, cache = get_embedder(cfg), EmbeddingCache(Path(a.workspace) / "cache" / "embeddings.sqlite")
        embed = lambda texts: cache.embed(emb, cfg.key, list(texts), "passage")  # noqa: E731
    t0 = time.perf_counter()
    rows = eq + rt
    rng_aug = np.random.default_rng(a.seed)
    names = sorted({m.group() for r in rows for e in r["evidence"][:1] for m in _CAP.finditer(e)})
    synth = [] if a.no_augment else [p for r in rows if r["label"] == 1 for p in perturb(r, rng_aug, names)]
    rows = rows + synth
    X = np.vstack([features(r["claim"], r["evidence"], "en", embed, model) for r in rows])
    secs = time.perf_counter() - t0
    y = np.array([r["label"] for r in rows])
    groups = np.array([r["question"] for r in rows])
    src = np.array(["expertqa"] * len(eq) + ["ragtruth"] * len(rt) + ["synthetic"] * len(synth))
    real = src != "synthetic"
    sw = np.where(real, 1.0, a.synthetic_weight)

    # grouped 5-fold cross-validation: every question's rows in exactly one test fold
    uq = sorted(set(groups))
    rng = np.random.default_rng(a.seed)
    fold_of = dict(zip(uq, rng.permutation(len(uq)) % 5))
    folds = np.array([fold_of[g] for g in groups])
    oof = np.zeros(len(y))
    for k in range(5):  # synthetic rows train (with their question's fold) but are never scored
        tr, te = folds != k, (folds == k) & real
        oof[te] = predict(X[te], *fit(X[tr], y[tr], a.seed, a.C, sw[tr]))
    report = {"n": {s: int((src == s).sum()) for s in ("expertqa", "ragtruth", "synthetic")},
              "features_seconds": round(secs, 1)}
    for s in ("expertqa", "ragtruth"):
        m = src == s
        if m.any():
            report[f"{s}_auroc"] = round(auroc(y[m], oof[m]), 4)
            report[f"{s}_overlap_auroc"] = round(auroc(y[m], X[m, FEATURES.index("cov")]), 4)
    if rt:
        m = src == "ragtruth"
        items = {}
        for r, p in zip([r for r in rows if "item" in r and not r.get("synthetic")], oof[m]):
            items.setdefault(r["item"], [r["hallucinated"], []])[1].append(p)
        ya = np.array([0 if h else 1 for h, _ in items.values()])
        report["ragtruth_answer_auroc"] = round(auroc(ya, np.array([min(ps) for _, ps in items.values()])), 4)
        cov = {}
        for r, c in zip([r for r in rows if "item" in r and not r.get("synthetic")], X[m, FEATURES.index("cov")]):
            cov.setdefault(r["item"], []).append(c)
        report["ragtruth_answer_overlap_auroc"] = round(auroc(ya, np.array([min(v) for v in cov.values()])), 4)
    # threshold: the cross-validated probability that maximises F1 of "unsupported" detection, then its
    # precision and recall for the supported class (documented in docs/metrics.md)
    best = (0.0, 0.5)
    for t in np.round(np.arange(0.05, 0.96, 0.01), 2):
        pred_uns, uns = (oof < t) & real, (y == 0) & real
        tp = (pred_uns & uns).sum()
        f1 = 2 * tp / max(1, pred_uns.sum() + uns.sum())
        if f1 > best[0]:
            best = (float(f1), float(t))
    thr = best[1]
    sup_pred = (oof >= thr) & real
    report.update(threshold=thr, unsupported_f1=round(best[0], 4),
                  supported_precision=round(float((sup_pred & (y == 1)).sum() / max(1, sup_pred.sum())), 4),
                  supported_recall=round(float((sup_pred & (y == 1)).sum() / max(1, ((y == 1) & real).sum())), 4))
    mean, scale, coef, intercept = fit(X, y, a.seed, a.C, sw)
    model.update(mean=[round(float(v), 8) for v in mean], scale=[round(float(v), 8) for v in scale],
                 coef=[round(float(v), 8) for v in coef], intercept=round(intercept, 8), threshold=thr,
                 features=list(FEATURES), seed=a.seed, C=a.C, e5=not a.no_e5,
                 cv={k: v for k, v in report.items() if k != "features_seconds"},  # no timings: reproducible
                 augment=not a.no_augment, synthetic_weight=a.synthetic_weight)
    Path(a.out).write_text(json.dumps(model, sort_keys=True, separators=(",", ":")) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
