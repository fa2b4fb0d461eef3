"""How far to trust each faithfulness judge: agreement with human support labels (``ragwb
agreement``), and claim checking on its own (``ragwb score-claims``). docs/metrics.md.

The labels: ExpertQA claims with their cited evidence (MIT), the questions held out of the offline
model's training (``datasets/support/expertqa_agreement.jsonl.gz``); label 1 = fully supported
(Complete), 0 = Partial or Incomplete.
"""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

from rag.ingest.readers import datasets_dir

from evals.stats import DEFAULT_SEED


def agreement_set() -> list[dict]:
    path = datasets_dir() / "support" / "expertqa_agreement.jsonl.gz"
    return [json.loads(x) for x in gzip.open(path, "rt", encoding="utf-8")]


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    """Mann-Whitney AUROC, ties counted half (average ranks)."""
    y, s = np.asarray(y), np.asarray(s, dtype=float)
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if not n1 or not n0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(len(s))
    _, first, counts = np.unique(sorted_s, return_index=True, return_counts=True)
    for f, c in zip(first, counts):
        ranks[order[f:f + c]] = f + (c + 1) / 2
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def f1_unsupported(y: np.ndarray, s: np.ndarray, thr: float) -> float:
    """F1 of detecting not-fully-supported claims (score below the threshold)."""
    pred, truth = s < thr, y == 0
    tp = int((pred & truth).sum())
    return 2 * tp / max(1, int(pred.sum() + truth.sum()))


def balanced_accuracy(y: np.ndarray, s: np.ndarray, thr: float) -> float:
    """Mean of the recall on supported claims (score >= thr) and on the others (score < thr)."""
    y, pred = np.asarray(y), np.asarray(s, dtype=float) >= thr
    pos, neg = y == 1, y == 0
    if not pos.any() or not neg.any():
        return float("nan")
    return float((pred[pos].mean() + (~pred[neg]).mean()) / 2)


def bootstrap(y, s, fn, n: int = 1000, seed: int = DEFAULT_SEED) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n):
        i = rng.integers(0, len(y), len(y))
        if len(set(y[i])) == 2:
            vals.append(fn(y[i], s[i]))
    if not vals:  # no ok score, or one class only: no interval (never an IndexError after the judge's calls)
        return float("nan"), float("nan")
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def judge_offline(rows: list[dict], embed=None):
    from .support import support_score

    return [support_score(r["claim"], r["evidence"], "en", embed) for r in rows], 0.0


def judge_llm(name: str, client, rows: list[dict], progress=None, repeats: int = 1):
    """``progress``: a tqdm class (``tqdm.auto.tqdm`` in a notebook draws one widget; default: text on stderr, for
    the command line)."""
    from .judges import get_judge

    import sys

    from tqdm import tqdm

    from .judges import judge_repeated

    j = get_judge(name, client)
    j.repeats = repeats  # each claim judged as a run with --judge-repeats judges an item: the mean of N samples
    before = client.stats.dollars_spent + client.stats.dollars_saved
    scores, statuses = [], {}
    bar = (progress(rows, desc=f"judge {name}", unit="claim", leave=False) if progress is not None else
           tqdm(rows, desc=f"judge {name}", unit="claim", file=sys.stderr, dynamic_ncols=True))
    for r in bar:
        sc = judge_repeated(j, "", r["claim"], r["evidence"], 0, None)
        scores.append(sc.value if sc.status == "ok" and sc.value is not None else np.nan)
        statuses[sc.status] = statuses.get(sc.status, 0) + 1
        if sc.status != "ok":
            judge_llm.last_error = sc.detail
        bar.set_postfix(statuses)
    judge_llm.statuses = statuses
    # what judging costs at list price, whether this run paid it or the response cache did
    return scores, client.stats.dollars_spent + client.stats.dollars_saved - before


def run_agreement(limit: int | None = None, llm_client=None, llm_judges=(), resamples: int = 1000,
                  on_row=None, offline: bool = True, progress=None, repeats: int = 1) -> list[dict]:
    """Every judge's agreement with the human labels; ``on_row(row)`` as each judge finishes. ``offline=False``: the
    LLM judges only (the page measures its judge, not the offline scorers again)."""
    from .support import support_embedder, threshold

    rows = agreement_set()[:limit] if limit else agreement_set()
    y = np.array([r["label"] for r in rows])
    out = []
    judges = []
    if offline:
        judges += [("offline support model", lambda: judge_offline(rows, support_embedder()), threshold()),
                   ("offline, lexical only (no e5)", lambda: judge_offline(rows, None), threshold()),
                   ("word overlap (baseline)", lambda: (_overlap(rows), 0.0), 0.6)]
    for name in llm_judges:
        judges.append((name, lambda n=name: judge_llm(n, llm_client, rows, progress, repeats), 0.5))
    for name, fn, thr in judges:
        t0 = time.perf_counter()
        scores, dollars = fn()
        secs = time.perf_counter() - t0
        s = np.array(scores, dtype=float)
        ok = ~np.isnan(s)
        ys, ss = y[ok], s[ok]
        a = auroc(ys, ss)
        f = f1_unsupported(ys, ss, thr) if ok.any() else float("nan")
        out.append({"judge": name, "n": int(ok.sum()), "failed": int((~ok).sum()), "auroc": round(a, 3),
                    "auroc_95ci": [round(v, 3) for v in bootstrap(ys, ss, auroc, resamples)],
                    "threshold": thr, "f1_unsupported": round(f, 3),
                    "f1_95ci": [round(v, 3) for v in bootstrap(ys, ss, lambda a_, b_: f1_unsupported(a_, b_, thr),
                                                               resamples)],
                    "balanced_accuracy": round(balanced_accuracy(ys, ss, thr), 3) if ok.any() else float("nan"),
                    "balanced_accuracy_95ci": [round(v, 3) for v in bootstrap(
                        ys, ss, lambda a_, b_: balanced_accuracy(a_, b_, thr), resamples)],
                    "statements_per_s": round(len(rows) / secs, 1) if secs else None,
                    "usd_per_1000": round(1000 * dollars / len(rows), 4)})
        if not ok.any():  # say why, with what to change (a judge that never answered usably)
            out[-1]["note"] = (f"no usable verdict from {name}: {getattr(judge_llm, 'statuses', {})}; last error: "
                               f"{str(getattr(judge_llm, 'last_error', ''))[:200]} (raise --judge-max-tokens, "
                               "--timeout, or check the endpoint)")
        if on_row is not None:
            on_row(out[-1])
    return out


def _overlap(rows: list[dict]) -> list[float]:
    from rag.textproc import analyze

    out = []
    for r in rows:
        terms = set(analyze(r["claim"], "en", stopwords=True))
        ctx = set()
        for e in r["evidence"]:
            ctx |= set(analyze(e, "en"))
        out.append(len(terms & ctx) / len(terms) if terms else 1.0)
    return out


def render_header(n_pos: int, n_neg: int) -> str:
    return "\n".join([f"Agreement with human support labels: ExpertQA held-out claims ({n_pos} fully supported, "
                      f"{n_neg} partially/incompletely supported). AUROC: does the judge rank supported claims above "
                      "the others; F1: detecting not-fully-supported claims at the judge's threshold. 95% bootstrap "
                      "intervals. BalAcc: balanced accuracy at the threshold (the mean of the recall on each class).", "",
                      f"{'judge':34s} {'n':>5s} {'AUROC':>6s} {'95% CI':>15s} {'F1':>6s} {'95% CI':>15s} {'thr':>5s} "
                      f"{'BalAcc':>6s} {'stmt/s':>8s} {'$/1k':>7s}"])


def render_row(r: dict) -> str:
    return (f"{r['judge']:34s} {r['n']:5d} {r['auroc']:6.3f} {str(r['auroc_95ci']):>15s} "
            f"{r['f1_unsupported']:6.3f} {str(r['f1_95ci']):>15s} {r['threshold']:5.2f} "
            f"{r.get('balanced_accuracy', float('nan')):6.3f} {r['statements_per_s'] or 0:8.1f} {r['usd_per_1000']:7.4f}"
            + (f"  ({r['failed']} failed)" if r["failed"] else "") + (f"\n    {r['note']}" if r.get("note") else ""))


def render(rows: list[dict], n_pos: int, n_neg: int) -> str:
    return "\n".join([render_header(n_pos, n_neg)] + [render_row(r) for r in rows])


def main_agreement(a) -> int:
    client, judges = None, tuple(a.judges or ())
    if a.judge_base_url:
        from rag.llm.client import LLMClient, LLMConfig

        repeats = int(getattr(a, "judge_repeats", 1) or 1)
        # --judge-repeats: the judge as a run with repeats asks it (sampled, the mean of N replies): the identity a
        # run's agreement line looks up, so `show`'s hint can be satisfied (issue 85)
        from .judges import JUDGE_REPEAT_TEMPERATURE

        client = LLMClient(LLMConfig(a.judge_base_url, a.judge_model or "", a.judge_key_env,
                                     JUDGE_REPEAT_TEMPERATURE if repeats > 1 else 0.0, a.judge_max_tokens, a.timeout),
                           Path(a.workspace) / "cache" / "llm.sqlite")
        from .judges import DEFAULT_LLM_JUDGES

        judges = judges or DEFAULT_LLM_JUDGES  # each on labels of what it judges (agreement_sets.LABEL_SOURCES)
    elif judges:
        raise ValueError("--judges needs --judge-base-url and --judge-model")
    check_measurable(judges)  # before any work: a typo, or a judge these labels do not fit, is one line
    data = agreement_set()[:a.limit] if a.limit else agreement_set()
    on_support = tuple(j for j in judges if j in SUPPORT_LABELLED)  # ExpertQA's support labels
    on_built = tuple(j for j in judges if j not in SUPPORT_LABELLED)  # labels built from SQuAD 2.0
    if client is not None:  # the cost line before any judge call; on a terminal it waits for a yes
        from rag.llm.spend import BoundPlan, confirm_spend, price_text

        built_n = min(a.limit or BUILT_ITEMS, BUILT_ITEMS)
        n = len(data) * len(on_support) + built_n * len(on_built)
        ragas = any(j.startswith("ragas_") for j in judges)
        # one call an item for a chat judge ("up to": cached ones are free); ragas asks several a claim
        parts = ([f"{len(data):,} labelled claim(s) x {', '.join(on_support)}"] if on_support else []) + (
            [f"{built_n:,} labelled item(s) x {j}" for j in on_built])
        spend = BoundPlan(f"{'; '.join(parts)} at {client.cfg.model}: "
                          + (f"at least {n:,} call(s) (ragas asks several a claim)" if ragas else f"up to {n:,} call(s)")
                          + f"; those in the response cache are free; {price_text(client.cfg.model)}", n,
                          up_to=not ragas)
        if not confirm_spend("ragwb agreement", spend, getattr(a, "yes", False)):
            print("nothing sent")
            return 0
    print(render_header(sum(r["label"] for r in data), sum(1 - r["label"] for r in data)), flush=True)
    # each judge's row as soon as it is measured: a slow LLM judge never hides the offline rows
    repeats = int(getattr(a, "judge_repeats", 1) or 1)
    rows = run_agreement(a.limit, client, on_support, a.resamples, on_row=lambda r: print(render_row(r), flush=True),
                         repeats=repeats)
    if on_built:
        from .agreement_sets import items_for

        for name in on_built:
            row = measure_built(name, client, items_for(name, min(a.limit or BUILT_ITEMS, BUILT_ITEMS)), a.resamples,
                                repeats)
            print(render_alignment(row), flush=True)
            rows.append(row)
    if client is not None:  # each LLM judge's figure kept with its identity: every judged metric prints it, and
        for r in rows:      # a measurement that got no usable verdict is kept as failed (show says it was tried)
            if r["judge"] in judges:
                remember_agreement(a.workspace, r["judge"], client.cfg.model, client.cfg.base_url, r,
                                   judge_settings(client.cfg, repeats))
    if a.json_out:
        Path(a.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_out).write_text(json.dumps(rows, indent=1))
    return 0


AGREEMENT_FILE = "judge_agreement.json"  # in the workspace: one entry per judge identity, the latest measurement


def judge_settings(cfg, repeats: int = 1) -> dict:
    """The settings of a judge's endpoint that change its verdicts, from an ``LLMConfig`` or a stored run config's
    judge dict: its reply format (auto unless named), its max tokens (a cut reply is a parse error) and, past one,
    its sampled repeats (--judge-repeats: a mean of samples is another instrument than one reply)."""
    get = cfg.get if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
    return {"format": get("response_format", "") or "auto", "max_tokens": int(get("max_tokens", 1024) or 1024),
            **({"repeats": int(repeats)} if repeats and int(repeats) > 1 else {})}


def judge_identity(name: str, model: str, base_url: str | None, settings: dict | None = None) -> dict:
    """What a stored agreement figure belongs to: the judge, its prompt's version, the model, the endpoint (its
    secrets redacted), its reply format and max tokens. Another prompt, model, endpoint, format or token budget is
    another judge, never measured until asked."""
    from rag.llm.urls import redact_url

    from .judges import JUDGES, prompt_version

    return {"judge": name, "prompt": prompt_version(name) if name in JUDGES else "", "model": model,
            "endpoint": redact_url(base_url) or "", **(settings or {"format": "auto", "max_tokens": 1024})}


MAX_AGREEMENT_FILE_BYTES = 4 << 20  # a few hundred judge identities: far more is a damaged or hostile file


def stored_agreements(workspace) -> list[dict]:
    path = Path(workspace) / AGREEMENT_FILE
    if not path.is_file() or path.stat().st_size > MAX_AGREEMENT_FILE_BYTES:
        return []
    from rag.safeio import loads_bounded

    try:
        data = loads_bounded(path.read_bytes())
    except ValueError:
        return []  # a damaged file measures nothing: the line says "not measured", never a made-up figure
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def remember_agreement(workspace, name: str, model: str, base_url: str | None, row: dict,
                       settings: dict | None = None) -> None:
    from rag.safeio import write_whole

    ident = judge_identity(name, model, base_url, settings)
    keep = [e for e in stored_agreements(workspace) if e.get("identity") != ident]
    def finite(v):  # a failed measurement's NaN is stored as null (strict JSON), never as a figure
        if isinstance(v, list):
            return [finite(x) for x in v]
        return v if not isinstance(v, float) or v == v and abs(v) != float("inf") else None

    keep.append({"identity": ident, "n": row["n"], "failed": row["failed"], "threshold": row.get("threshold"),
                 "balanced_accuracy": finite(row.get("balanced_accuracy")),
                 "balanced_accuracy_95ci": finite(row.get("balanced_accuracy_95ci")), "auroc": finite(row.get("auroc")),
                 "auroc_95ci": finite(row.get("auroc_95ci")), "measured": time.strftime("%Y-%m-%d"),
                 **({"note": str(row.get("note") or "no usable verdict")[:200]} if not row["n"] else {}),
                 **{k: row[k] for k in ("labels", "kappa", "confusion", "calibration") if row.get(k) is not None},
                 **({"worst": [{**w, "question": str(w.get("question", ""))[:120]} for w in row["worst"][:5]]}
                    if row.get("worst") else {})})
    Path(workspace).mkdir(parents=True, exist_ok=True)
    write_whole(Path(workspace) / AGREEMENT_FILE, json.dumps(keep, indent=1).encode())


# judges with a labelled set to measure them on: faithfulness on ExpertQA's human support labels; sufficiency and
# relevance on labels built from SQuAD 2.0 (evals/score/agreement_sets.py); the others say none ships yet
SUPPORT_LABELLED = ("llm_faithfulness", "ragas_faithfulness")
MEASURABLE = SUPPORT_LABELLED + ("llm_context_sufficiency", "llm_answer_relevance")
BUILT_ITEMS = 200  # items of a built label set measured (--limit fewer)


def render_alignment(r: dict) -> str:
    """A built-label judge's agreement as an alignment report: the figure with chance, kappa, the confusion matrix,
    calibration by bucket and the worst misses."""
    lines = [f"{r['judge']} on {r['labels']}: n={r['n']}" + (f" ({r['failed']} failed)" if r["failed"] else "")]
    if not r["n"]:
        return "\n".join(lines + [f"    {r.get('note', '')}"])
    lo, hi = r["balanced_accuracy_95ci"]
    lines.append(f"    balanced accuracy {r['balanced_accuracy']:.3f} [{lo:.3f}, {hi:.3f}] (chance 0.50); kappa "
                 f"{r['kappa']:.3f} (chance 0); AUROC {r['auroc']:.3f}")
    lines.append("    confusion: " + "; ".join(f"{k} {v}" for k, v in r["confusion"].items()))
    lines.append("    calibration (judged value: share labelled 1): " + "; ".join(
        f"{c['judged']} {c['labelled 1']:.2f} (n={c['n']})" for c in r["calibration"]))
    for w in r["worst"]:
        lines.append(f"    miss: label {w['label']}, judged {w['judged']:.2f} ({w['kind']}): {w['question']}")
    return "\n".join(lines)


def check_measurable(judges) -> None:
    """ExpertQA's human labels say whether a claim is supported by its evidence: they measure faithfulness judges and
    nothing else. An unknown name, or a judge of something else (relevance, sufficiency), is refused before any work:
    its figure would be another judge's labels under its name."""
    from .judges import JUDGES

    for name in judges:
        if name not in JUDGES:
            raise ValueError(f"unknown judge {name!r}; valid: {', '.join(MEASURABLE)}")
        if name not in MEASURABLE:
            raise ValueError(f"{name} has no labelled set here: ExpertQA's support labels fit faithfulness judges, "
                             "the SQuAD 2.0 sets sufficiency and relevance; measuring it on another judge's labels "
                             f"would store them under its name (valid: {', '.join(MEASURABLE)})")


AT_CHANCE = "this judge agrees with people at chance: its values do not rank points"


def at_chance(workspace, name: str, model: str, base_url: str | None, settings: dict | None = None) -> bool:
    """Whether this judge's stored agreement with people has chance (0.50) inside its 95% interval (issue 85: a
    judge at chance ranks nothing; best, race and gate refuse it as a deciding metric without --trust-judge)."""
    ident = judge_identity(name, model, base_url, settings)
    hit = next((e for e in reversed(stored_agreements(workspace)) if e.get("identity") == ident), None)
    figure = _stored_figure(hit) if hit is not None else None
    return isinstance(figure, tuple) and figure[1] <= 0.5


def agreement_line(workspace, name: str, model: str, base_url: str | None, settings: dict | None = None) -> str:
    """"judge M: balanced accuracy 0.71 [0.66, 0.76] on 400 labelled claims", or why there is no figure; a judge
    whose interval holds chance is said to rank nothing, in a newcomer's words."""
    ident = judge_identity(name, model, base_url, settings)
    hit = next((e for e in reversed(stored_agreements(workspace)) if e.get("identity") == ident), None)
    if hit is not None:
        figure = _stored_figure(hit)
        if isinstance(figure, str):
            return f"{name} judged by {model}: {figure}"
        ba, lo, hi, n, when = figure
        from .agreement_sets import LABEL_SOURCES

        chance = f"; {AT_CHANCE}" if lo <= 0.5 else ""
        if name in SUPPORT_LABELLED:
            return (f"{name} judged by {model}: balanced accuracy {ba:.2f} [{lo:.2f}, {hi:.2f}] on {n:,} labelled "
                    f"claims (chance 0.50; ExpertQA, human support labels; measured {when}){chance}")
        return (f"{name} judged by {model}: balanced accuracy {ba:.2f} [{lo:.2f}, {hi:.2f}] on {n:,} labelled items "
                f"(chance 0.50; {LABEL_SOURCES[name]}; measured {when}){chance}")
    if name in MEASURABLE:
        from rag.llm.urls import redact_url

        st = settings or {}
        # the command measures this very identity: its repeats and token budget too, so following it clears the line
        more = ((f" --judge-repeats {st['repeats']}" if st.get("repeats") else "")
                + (f" --judge-max-tokens {st['max_tokens']}" if st.get("max_tokens", 1024) != 1024 else ""))
        return (f"{name} judged by {model}: agreement not measured (ragwb agreement --judge-base-url "
                f"{redact_url(base_url)} --judge-model {model} --judges {name}{more})")
    return (f"{name} judged by {model}: agreement not measured (no human-labelled set for this judge ships yet; "
            "read its scores as the judge's, not people's)")


def measure_built(name: str, client, items: list[dict], resamples: int = 1000, repeats: int = 1) -> dict:
    """Agreement of judge ``name`` with the items' labels: n (usable verdicts), failed, balanced accuracy at 0.5 with
    its 95% bootstrap interval, Cohen's kappa, the confusion matrix, calibration by bucket and the worst misses."""
    import sys

    from tqdm import tqdm

    from .agreement_sets import judge_item
    from .judges import get_judge

    j = get_judge(name, client)
    j.repeats = repeats
    values, statuses, last = [], {}, ""
    for item in tqdm(items, desc=f"judge {name}", unit="item", file=sys.stderr, dynamic_ncols=True):
        sc = judge_item(j, item)
        values.append(sc.value if sc.status == "ok" and sc.value is not None else np.nan)
        statuses[sc.status] = statuses.get(sc.status, 0) + 1
        if sc.status != "ok":
            last = sc.detail
    return alignment_row(name, np.array([i["label"] for i in items]), np.array(values, dtype=float), items,
                         statuses, last, resamples)


def alignment_table(workspace, judges: list[tuple]):
    """The alignment report of each judge (name, model, base_url, settings) as a table: its label source, n, balanced
    accuracy with its interval and chance, kappa, the confusion matrix, calibration by bucket and its worst miss; a
    judge never measured (or measured and failed, or damaged) has its line's words in place of figures."""
    import pandas as pd

    from .agreement_sets import LABEL_SOURCES

    rows = []
    for name, model, base_url, settings in judges:
        ident = judge_identity(name, model, base_url, settings)
        hit = next((e for e in reversed(stored_agreements(workspace)) if e.get("identity") == ident), None)
        figure = _stored_figure(hit) if hit is not None else "agreement not measured"
        row = {"judge": name, "judged by": model, "labels": LABEL_SOURCES.get(name, "none ships yet")}
        if isinstance(figure, str):
            rows.append({**row, "balanced accuracy (95% CI)": figure})
            continue
        ba, lo, hi, n, when = figure
        conf = hit.get("confusion") if isinstance(hit.get("confusion"), dict) else {}
        cal = hit.get("calibration") if isinstance(hit.get("calibration"), list) else []
        worst = hit.get("worst") if isinstance(hit.get("worst"), list) and hit.get("worst") else []
        kappa = hit.get("kappa")
        rows.append({**row, "n": n, "balanced accuracy (95% CI)": f"{ba:.2f} [{lo:.2f}, {hi:.2f}]", "chance": "0.50",
                     "kappa": f"{kappa:.2f}" if isinstance(kappa, (int, float)) and not isinstance(kappa, bool)
                     else "", "confusion (label/judged 1-1, 1-0, 0-1, 0-0)": " / ".join(
                         str(int(v)) for v in conf.values() if isinstance(v, int)) if conf else "",
                     "calibration (judged: share labelled 1)": "; ".join(
                         f"{c.get('judged')}: {c.get('labelled 1')}" for c in cal if isinstance(c, dict)),
                     "worst miss": (f"label {worst[0].get('label')}, judged {worst[0].get('judged')}: "
                                    f"{str(worst[0].get('question', ''))[:80]}"
                                    if worst and isinstance(worst[0], dict) else ""),
                     "measured": when})
    return pd.DataFrame(rows)


def alignment_row(name, y, s, items, statuses, last, resamples) -> dict:
    """A built-label judge's agreement: n, failed, balanced accuracy at 0.5 with its interval, AUROC, kappa, the
    confusion matrix, calibration by bucket and the worst misses (``s``: the judged values, NaN where none)."""
    from .agreement_sets import LABEL_SOURCES, cohen_kappa

    ok = ~np.isnan(s)
    ys, ss = y[ok], s[ok]
    row = {"judge": name, "n": int(ok.sum()), "failed": int((~ok).sum()), "threshold": 0.5,
           "labels": LABEL_SOURCES.get(name, ""), "statuses": statuses}
    if not ok.any():
        row.update(balanced_accuracy=float("nan"), balanced_accuracy_95ci=[float("nan")] * 2, auroc=float("nan"),
                   auroc_95ci=[float("nan")] * 2,
                   note=f"no usable verdict from {name}: {statuses}; last error: {str(last)[:200]}")
        return row
    pred = (ss >= 0.5).astype(int)
    row.update(
        balanced_accuracy=round(balanced_accuracy(ys, ss, 0.5), 3),
        balanced_accuracy_95ci=[round(v, 3) for v in bootstrap(ys, ss, lambda a, b: balanced_accuracy(a, b, 0.5),
                                                               resamples)],
        auroc=round(auroc(ys, ss), 3), auroc_95ci=[round(v, 3) for v in bootstrap(ys, ss, auroc, resamples)],
        kappa=round(cohen_kappa(ys, pred), 3),
        confusion={"label 1, judged 1": int(((ys == 1) & (pred == 1)).sum()),
                   "label 1, judged 0": int(((ys == 1) & (pred == 0)).sum()),
                   "label 0, judged 1": int(((ys == 0) & (pred == 1)).sum()),
                   "label 0, judged 0": int(((ys == 0) & (pred == 0)).sum())},
        calibration=calibration(ys, ss),
        worst=[{"kind": it.get("kind", ""), "label": int(it["label"]), "judged": float(v),
                "question": it["question"][:120]}
               for it, v in sorted(((it, v) for it, v in zip(items, s) if v == v),
                                   key=lambda x: -abs(x[0]["label"] - x[1]))[:5] if abs(it["label"] - v) >= 0.5])
    return row


def calibration(y: np.ndarray, s: np.ndarray) -> list[dict]:
    """The share labelled 1 among items the judge scored in each bucket of its value."""
    out = []
    for lo, hi in ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01)):
        m = (s >= lo) & (s < hi)
        if m.any():
            out.append({"judged": f"{lo:.2f}-{min(hi, 1.0):.2f}", "n": int(m.sum()),
                        "labelled 1": round(float(y[m].mean()), 3)})
    return out


MAX_LABELLED = 10_000_000  # no labelled set is larger: a stored n past it is a damaged (or planted) entry


def _stored_figure(e: dict):
    """(balanced accuracy, low, high, n, date) of a stored entry, or the line that says why there is none: a failed
    measurement is said as failed; a damaged entry (a string, a missing n, a one-value interval, out of range, NaN)
    is never printed as a figure."""
    import math
    import re

    when = e.get("measured")
    when = when if isinstance(when, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", when) else "?"
    n, failed = e.get("n"), e.get("failed")
    if (isinstance(n, int) and not isinstance(n, bool) and n == 0 and isinstance(failed, int)
            and 0 <= failed <= MAX_LABELLED):
        from rag.safeio import printable

        # control characters (ESC, BEL: a note is a reply's text) shown as escapes, never sent to a terminal
        note = printable(" ".join(str(e.get("note") or "no usable verdict").split())[:120])
        return (f"agreement measurement failed on {when} ({failed:,} claim(s) with no usable verdict: "
                f"{note.encode('ascii', 'backslashreplace').decode()}); nothing measured, so read its scores as the "
                "judge's alone")

    def num(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    ba, ci = num(e.get("balanced_accuracy")), e.get("balanced_accuracy_95ci")
    lo, hi = (num(ci[0]), num(ci[1])) if isinstance(ci, list) and len(ci) == 2 else (None, None)
    if (ba is None or lo is None or hi is None or not isinstance(n, int) or isinstance(n, bool)
            or not 0 < n <= MAX_LABELLED  # n=10**400 was printed as a 401-digit figure
            or not (0 <= lo <= hi <= 1 and 0 <= ba <= 1)):  # a percentile interval may leave out its point
        return "agreement not measured (the stored figure is damaged; measure again with ragwb agreement)"
    return ba, lo, hi, n, when


def main_score_claims(a) -> int:
    """Score claims from a JSONL file: {"statement" (or "claim"): str, "passages" (or "evidence"): [str]}."""
    from .support import load_model, support_embedder, support_score, threshold

    embed = None if a.no_e5 else support_embedder()
    thr, out, bad = threshold(), [], 0
    with open(a.file, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
                st = rec.get("statement", rec.get("claim"))
                ps = rec.get("passages", rec.get("evidence"))
                if not isinstance(st, str) or not st.strip():
                    raise ValueError("field 'statement' must be a non-empty string")
                if isinstance(ps, str):
                    ps = [ps]
                if not isinstance(ps, list) or not all(isinstance(p, str) for p in ps):
                    raise ValueError("field 'passages' must be a list of strings")
            except (ValueError, AttributeError) as e:
                print(f"{a.file}:{line_no}: skipped: {e}", file=sys.stderr)
                bad += 1
                continue
            p = support_score(st, ps, a.lang, embed)
            out.append({**rec, "support": round(p, 6), "supported": p >= thr, "model": load_model()["id"]})
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out)
    if a.out:
        Path(a.out).write_text(text)
        print(f"scored {len(out)} claims ({bad} skipped) -> {a.out}")
    else:
        sys.stdout.write(text)
    return 0 if not bad else 3
