"""CI regression gate: paired bootstrap intervals of per-question deltas, per strategy and metric.

Fails (exit 1) when
  * a metric's whole 95% interval lies beyond its tolerance in the worse direction,
  * a point of either run lost more than ``max_error_rate`` of its items (default 2%; an item is lost
    when any of its scores failed),
  * the datasets or the question sets differ (the message lists the questions).
Tolerances: docs/gate.md; defaults below, overridable with a TOML file ([tolerances]).
"""
from __future__ import annotations

import gzip
import json
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from evals.score.metrics import METRICS, NOT_FAILURES
from evals.stats import DEFAULT_SEED, JUDGED_GAP, paired_bootstrap, paired_bootstrap_columns
from evals.store import ResultStore

DEFAULT_TOLERANCES = {"default": 0.02, "context_tokens": "rel:0.05", "prompt_tokens": "rel:0.05",
                      "completion_tokens": "rel:0.10", "cost_usd": "rel:0.05", "context_tokens_est": "rel:0.05",
                      "token_estimate_error": 0.05}
GATED_DEFAULT = ["em", "f1", "abstention_accuracy", "citation_validity", "citation_precision", "citation_recall",
                 "statement_coverage", "faithfulness", "evidence_recall", "doc_ndcg@10", "page_ndcg@10",
                 "context_tokens", "prompt_tokens", "cost_usd"]
JUDGED_GATED = ["judged_ndcg@10", "judged_recall@10", "judged_precision@5"]  # gated by default where judged
# the LLM judges' metrics: compared (the page's Compare, compare_runs) where both runs have them; the gate takes them
# when --metrics names them (a judge's noise is the gate's to weigh: docs/gate.md)
COMPARED_JUDGES = ["llm_faithfulness", "answer_relevance", "context_sufficiency", "ragas_faithfulness",
                   "ragas_context_recall", "ragas_answer_accuracy"]


# the costs a different chunking moves by design: between runs on different indexes they are reported, and gated only
# when --metrics names them (the user asked to compare them)
INDEX_COSTS = ("context_tokens", "prompt_tokens", "completion_tokens", "cost_usd", "context_tokens_est")


def index_settings(config: dict | None) -> dict:
    """A stored run config's index as flat settings: chunker, chunk_tokens, overlap, leaf_min, leaf_max,
    parent_max, encoding, embed_window, embedder (and its model where it has one)."""
    idx = (config or {}).get("index") or {}
    out = dict(idx.get("chunking") or {})
    emb = idx.get("embedder") or {}
    if emb:
        out["embedder"] = emb.get("name")
        if emb.get("model"):
            out["embed_model"] = emb.get("model")
    return out


def index_difference(base_config: dict | None, cand_config: dict | None, base_built: dict | None = None,
                     cand_built: dict | None = None) -> str:
    """"index differs: chunk_tokens 128 vs 256, overlap 16 vs 32" (baseline first), or "" when the two runs built
    the same index. Where both runs stored what each index config built (``index_built``: the chunking modes used,
    the settings they read, the embedder), that is compared, not the names: ``auto`` and ``tokens`` on PDFs build
    the same chunks, and chunk_tokens means nothing to a hierarchy-chunked Markdown folder."""
    if base_built and cand_built:
        a_ids = {json.dumps(v, sort_keys=True) for v in base_built.values()}
        b_ids = {json.dumps(v, sort_keys=True) for v in cand_built.values()}
        if a_ids <= b_ids or b_ids <= a_ids:  # every config of one run is a config of the other
            return ""
        if len(base_built) == 1 and len(cand_built) == 1:
            a, b = next(iter(base_built.values())), next(iter(cand_built.values()))
            diff = [f"{k} {a.get(k)} vs {b.get(k)}" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
            return "index differs: " + ", ".join(diff)
    a, b = index_settings(base_config), index_settings(cand_config)
    diff = [f"{k} {a.get(k)} vs {b.get(k)}" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    return "index differs: " + ", ".join(diff) if diff else ""


def per_question(store: ResultStore, run_id: str, part: str = "tune") -> tuple[str, pd.DataFrame]:
    """The run's per-question scores with point keys; ``part``: a run with confirm questions is read on its tune
    part (as every reader), its confirm part, or all (the gate's --questions)."""
    run = store.run(run_id)
    con = store.con
    cond = store._part(con, run_id, part, "s.question_id")
    df = con.execute(
        # a repeated judgment's detail keeps each repeat (--judge-repeats): the gate reads its noise and --require
        "SELECT s.strategy, r.point_label, r.params, s.question_id, s.repeat, s.metric, s.value, s.status, "
        "CASE WHEN s.detail LIKE '% repeats [%' THEN s.detail END AS detail "
        "FROM scores s JOIN results r USING (run_id, strategy, point_id, question_id, repeat) "
        f"WHERE s.run_id = ? AND {cond}", [run_id]).df()
    from .judgments import judged_scores

    j = judged_scores(store, run_id)  # the judged metrics, from the judgments stored now (none without)
    confirm = store.confirm_questions(run_id)
    if confirm is not None and len(j) and part != "all":
        j = j[j.question_id.isin(set(confirm)) == (part == "confirm")]
    if len(j):
        pts = store.con.execute("SELECT DISTINCT strategy, point_id, point_label, params FROM results WHERE run_id = ?",
                                [run_id]).df()
        j = j.merge(pts, on=["strategy", "point_id"])[df.columns]
        df = pd.concat([df, j], ignore_index=True)
    return run["dataset"], with_point_keys(df)


def canonical_params(strategy: str, params: str | None) -> str:
    """A point's parameters as sorted JSON with today's defaults under what was stored: a budget added
    later (code_block_chars) takes its default, so a baseline stored before it still matches."""
    if params is None or params != params:  # None or NaN
        return "null"
    d = json.loads(params)
    from rag.strategies import STRATEGIES

    s = STRATEGIES.get(strategy)
    if s is not None and isinstance(d, dict):
        import dataclasses

        d = {f.name: f.default for f in dataclasses.fields(s.Params)
             if f.default is not dataclasses.MISSING} | d
    return json.dumps(d, sort_keys=True)


def with_point_keys(df: pd.DataFrame) -> pd.DataFrame:
    """Points are matched by their full parameters (defaults filled in), not by label: `chunks top_k=8`
    and `chunks defaults` are the same point. The label shown is the candidate's."""
    if "params" in df.columns:
        # the few distinct points keyed, then joined back by a vectorised merge (a per-row Python loop over
        # Arrow-backed strings cost seconds at 600,000 rows)
        pairs = df[["strategy", "params"]].drop_duplicates().reset_index(drop=True)
        pairs["point_key"] = [f"{st} {canonical_params(st, p)}" for st, p in
                              zip(pairs.strategy.tolist(), pairs.params.tolist())]
        df = df.merge(pairs, on=["strategy", "params"], how="left", sort=False).drop(columns=["params"])
    elif "point_key" not in df.columns:  # an older baseline file: labels are all it has
        df = df.assign(point_key=df["strategy"] + " " + df["point_label"])
    return df


def write_baseline(path: str | Path, dataset: str, df: pd.DataFrame, run_id: str, run: dict | None = None) -> Path:
    """A run's per-question scores as a file a later gate reads; with the run's index (its config's ``index`` and
    what each index config built), so a gate against it says "index differs" as one against the run id does."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    run = run or {}
    payload = {"format": "ragwb-baseline/1", "run_id": run_id, "dataset": dataset,
               "config": {"index": (run.get("config") or {}).get("index")} if run.get("config") else None,
               "index_built": run.get("index_built") or None,
               "rows": df.astype(object).where(df.notna(), None).to_dict(orient="records")}
    data = json.dumps(payload, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def read_baseline(path: str | Path) -> tuple[str, pd.DataFrame]:
    """(dataset, rows) of a baseline file; ``rows.attrs`` holds its run's ``config`` (the index) and ``index_built``
    (None in a file written before they were kept)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    d = json.loads(raw)
    if d.get("format") != "ragwb-baseline/1":
        raise ValueError(f"{path}: not a ragwb baseline file")
    rows = pd.DataFrame(d["rows"])
    rows.attrs.update(config=d.get("config"), index_built=d.get("index_built"))
    return d["dataset"], rows


def _tol(tols: dict, metric: str, base_mean: float) -> float:
    t = tols.get(metric, tols.get("default", 0.02))
    if isinstance(t, str) and t.startswith("rel:"):
        return float(t[4:]) * abs(base_mean)
    return float(t)


def error_rate(df: pd.DataFrame) -> float:
    """The worst point's share of failed items (``point_error_rates``): one point that lost half its items
    fails the cap however many scores the other points have."""
    rates = point_error_rates(df)
    return max(rates.values()) if rates else 0.0


def point_error_rates(df: pd.DataFrame) -> dict[str, float]:
    """Per point (its key), the share of its items (question x repeat) with any failed score (any status
    but ok and not_applicable: a failed answer fails all its answer metrics, a failed judge its own)."""
    if not len(df):
        return {}
    bad = ~df.status.isin(NOT_FAILURES)
    key = "point_key" if "point_key" in df.columns else "point_label"
    rep = df["repeat"] if "repeat" in df.columns else 0
    items = df.assign(_bad=bad, _rep=rep).groupby([key, "question_id", "_rep"], sort=False)["_bad"].any()
    return {k: float(v) for k, v in items.groupby(level=0, sort=False).mean().items()}


def gate(base: tuple[str, pd.DataFrame], cand: tuple[str, pd.DataFrame], metrics: list[str] | None = None,
         tolerances: dict | None = None, max_error_rate: float = 0.02, aa_noise: bool = False,
         resamples: int = 2000, seed: int = DEFAULT_SEED, allow_missing_points: bool = False,
         judged_gap: float = JUDGED_GAP, index_differs: str = "", budgets: list | None = None,
         requires: list | None = None) -> dict:
    """``index_differs``: the two runs' index settings differ (``index_difference``); points still pair by
    question, and the token costs a chunking moves are reported but gated only when ``metrics`` names them.
    ``budgets``: absolute limits [(kind "max"|"min", metric, value)] on the candidate's point means (``check_budgets``).
    ``requires``: K-of-N rules on repeated judgments (evals/analyze/judge_repeats.py). ``aa_noise`` also widens a
    judged metric's tolerance by its judge's repeat noise where either run repeated its judgments.
    The result's ``exit_code``: 0 passed, 1 a regression or a budget exceeded, 3 the runs are not comparable."""
    asked = set(metrics or ())
    (bds, b), (cds, c) = base, cand
    b, c = with_point_keys(b), with_point_keys(c)
    # compare points by parameters; the candidate's labels name them
    # one label per point, from the (few) distinct points, never a pass over every row per row
    bp, cp = set(b.point_key.unique()), set(c.point_key.unique())
    c_lab = c.drop_duplicates("point_key")
    b_lab = b.drop_duplicates("point_key")
    labels = {k: v for k, v in zip(b_lab.point_key, b_lab.point_label) if k not in cp} | \
        dict(zip(c_lab.point_key, c_lab.point_label))
    named = lambda k: f"{k.split(' ', 1)[0]} [{labels[k]}]"  # noqa: E731 - strategy and point, never a bare label
    b = b.assign(point_label=b.point_key.map(labels))
    c = c.assign(point_label=c.point_key.map(labels))
    tols = {**DEFAULT_TOLERANCES, **(tolerances or {})}
    rows = []
    failures, bq, cq, cand_only, base_only = _preflight(b, c, bds, cds, bp, cp, labels, named,
                                                         allow_missing_points, max_error_rate)
    not_comparable = list(failures[:len(failures) - getattr(failures, "lost", 0)])
    if not metrics:  # the distinct metrics once (a set of 600,000 strings per judged metric took 11 s)
        both = set(c.metric.unique()) & set(b.metric.unique())
        metrics = GATED_DEFAULT + [m for m in JUDGED_GATED if m in both]
    shared = bq & cq
    warnings, uncompared = _judged_uncompared(b, c, shared, judged_gap)

    def mean_per_q(df):
        ok = df[(df.status == "ok") & df.question_id.isin(shared) & df.metric.isin(metrics)]
        return ok.groupby(["strategy", "point_label", "metric", "question_id"])["value"].mean()

    bm, cm = mean_per_q(b), mean_per_q(c)
    joined = pd.concat([bm.rename("b"), cm.rename("c")], axis=1, join="inner").reset_index()
    noise = {}
    if aa_noise and "repeat" in b.columns and b.repeat.nunique() > 1:
        r0 = b[(b.repeat == 0) & (b.status == "ok")].set_index(["strategy", "point_label", "metric", "question_id"]).value
        r1 = b[(b.repeat == 1) & (b.status == "ok")].set_index(["strategy", "point_label", "metric", "question_id"]).value
        aa = pd.concat([r0.rename("a0"), r1.rename("a1")], axis=1, join="inner").reset_index()
        for key, g in aa.groupby(["strategy", "point_label", "metric"]):
            pb = paired_bootstrap(g.a0, g.a1, resamples, seed=seed)
            noise[key] = max(abs(pb["low"]), abs(pb["high"]))
    judge_noise = {}
    if aa_noise:  # the judge's own noise: the same answers judged again (either run's repeats, the larger)
        from .judge_repeats import judge_noise as _jn

        for side in (b, c):
            for key, v in _jn(side, resamples, seed).items():
                judge_noise[key] = max(judge_noise.get(key, 0.0), v)
    boot = _point_bootstraps(joined, resamples, seed)
    for (strategy, point, metric) in sorted(boot):
        pb = boot[(strategy, point, metric)]
        if metric.startswith("judged") and (strategy, point) in uncompared:
            continue
        hib = METRICS[metric].higher_is_better if metric in METRICS else True
        base_tol, aa = _tol(tols, metric, pb["baseline"]), noise.get((strategy, point, metric), 0.0)
        jn = judge_noise.get((strategy, point, metric), 0.0)
        tol = max(base_tol, aa, jn)
        tol_from = ("judge repeat noise" if jn > max(base_tol, aa) else "A/A noise" if aa > base_tol else "file"
                    if metric in (tolerances or {}) or ("default" in (tolerances or {})
                                                        and metric not in DEFAULT_TOLERANCES) else "default")
        worse = (pb["high"] < -tol) if hib else (pb["low"] > tol)
        better = (pb["low"] > tol) if hib else (pb["high"] < -tol)
        if index_differs and metric in INDEX_COSTS and metric not in asked:  # a different index moves its costs
            worse, verdict = False, "changed (index differs)" if (better or (pb["high"] < -tol if hib else
                                                                             pb["low"] > tol)) else "ok"
        else:
            verdict = "REGRESSION" if worse else ("improved" if better else "ok")
        rows.append({"strategy": strategy, "point": point, "metric": metric, "n": pb["n"],
                     "baseline": pb["baseline"], "candidate": pb["candidate"], "delta": pb["delta"],
                     "low": pb["low"], "high": pb["high"], "tolerance": tol,
                     "direction": "higher" if hib else "lower", "verdict": verdict, "tolerance_from": tol_from})
        if worse:
            failures.append(f"{strategy} [{point}] {metric}: delta {pb['delta']:+.4f} "
                            f"(95% CI {pb['low']:+.4f} .. {pb['high']:+.4f}) beyond tolerance {tol:.4f}")
    checked = check_budgets(c, budgets or [])
    failures += [budget_line(x) for x in checked if x["verdict"] == "OVER BUDGET"]
    from .judge_repeats import check_requires, require_line

    required = check_requires(c, requires) if requires else []
    failures += [require_line(x) for x in required if x["verdict"] != "met"]
    return {"passed": not failures, "failures": failures, "warnings": warnings, "rows": rows,
            "budgets": checked, "requires": required, "not_comparable": not_comparable,
            "exit_code": 3 if not_comparable else (0 if not failures else 1),
            "index_difference": index_differs,
            "error_rates": {"baseline": error_rate(b), "candidate": error_rate(c)},
            "coverage": {"points_compared": len(bp & cp), "candidate_points": len(cp), "baseline_points": len(bp),
                         "candidate_only": [named(k) for k in cand_only],
                         "baseline_only": [named(k) for k in base_only],
                         "questions_compared": len(shared)}}


class _Failures(list):
    """The preflight's failures: the runs' comparability (exit 3) first, then ``lost`` points over the cap (exit 1)."""
    lost = 0


BUDGET_KINDS = ("max", "min")


def parse_budgets(maxes: list[str] | None, mins: list[str] | None) -> list[tuple]:
    """``--max METRIC=VALUE`` / ``--min METRIC=VALUE`` as [(kind, metric, value)]; a bad value or an unknown
    metric is a ValueError in one line."""
    out = []
    for kind, given in (("max", maxes or []), ("min", mins or [])):
        for text in given:
            metric, sep, value = str(text).partition("=")
            metric = metric.strip()
            if not sep or not metric:
                raise ValueError(f"--{kind} takes METRIC=VALUE (e.g. --{kind} cost_usd=0.002), got {text!r}")
            if metric not in METRICS:
                raise ValueError(f"--{kind} {text}: unknown metric {metric!r}; valid: {', '.join(sorted(METRICS))}")
            try:
                v = float(value)
            except ValueError:
                raise ValueError(f"--{kind} {text}: {value!r} is not a number") from None
            if not np.isfinite(v):
                raise ValueError(f"--{kind} {text}: the limit must be a finite number")
            out.append((kind, metric, v))
    return out


def check_budgets(c: pd.DataFrame, budgets: list, resamples: int = 2000,
                  seed: int = DEFAULT_SEED) -> list[dict]:
    """Each budget on each candidate point's mean (per question, over repeats) with its 95% bootstrap interval: OVER
    BUDGET when the whole interval is beyond the limit, "within" when the whole interval is inside, else "unsure"
    (the interval straddles the limit: more questions would tell); a point with no value is "no value"."""
    from evals.stats import bootstrap_ci

    out = []
    for kind, metric, limit in budgets:
        sub = c[(c.metric == metric) & (c.status == "ok")]
        points = c.drop_duplicates("point_key")[["point_key", "strategy", "point_label"]]
        for _, p in points.iterrows():
            v = sub[sub.point_key == p.point_key].groupby("question_id")["value"].mean().to_numpy(float)
            row = {"strategy": p.strategy, "point": p.point_label, "metric": metric, "kind": kind, "limit": limit,
                   "n": int(len(v))}
            if not len(v):
                out.append({**row, "mean": float("nan"), "low": float("nan"), "high": float("nan"),
                            "verdict": "no value"})
                continue
            _, lo, hi = bootstrap_ci(v, n_resamples=resamples, seed=seed)
            beyond = lo > limit if kind == "max" else hi < limit
            inside = hi <= limit if kind == "max" else lo >= limit
            out.append({**row, "mean": float(v.mean()), "low": float(lo), "high": float(hi),
                        "verdict": "OVER BUDGET" if beyond else "within" if inside else "unsure"})
    return out


def budget_line(b: dict) -> str:
    rel = "at most" if b["kind"] == "max" else "at least"
    return (f"{b['strategy']} [{b['point']}] {b['metric']}: mean {b['mean']:.6g} (95% CI {b['low']:.6g} .. "
            f"{b['high']:.6g}, n={b['n']}) against a budget of {rel} {b['limit']:g}: {b['verdict']}")


def _preflight(b, c, bds, cds, bp: set, cp: set, labels: dict, named, allow_missing_points: bool,
               max_error_rate: float):
    """What fails a gate before any metric: other datasets, other question sets, candidate points without a
    baseline, points that lost items. (failures, baseline questions, candidate questions, candidate-only points,
    baseline-only points)."""
    failures = []
    if bds != cds:
        failures.append(f"datasets differ: baseline {bds!r}, candidate {cds!r}")
    bq, cq = set(b.question_id.unique()), set(c.question_id.unique())  # distinct first: 600,000 rows a run
    if bq != cq:
        only_b, only_c = sorted(bq - cq), sorted(cq - bq)
        failures.append("question sets differ: " + "; ".join(x for x in (
            f"{len(only_b)} only in baseline ({', '.join(only_b[:20])}{' ...' if len(only_b) > 20 else ''})" if only_b else "",
            f"{len(only_c)} only in candidate ({', '.join(only_c[:20])}{' ...' if len(only_c) > 20 else ''})" if only_c else "")
            if x))
    cand_only, base_only = sorted(cp - bp), sorted(bp - cp)
    if cand_only and not allow_missing_points:
        failures.append(f"{len(cand_only)} of {len(cp)} candidate points have no baseline to compare with: "
                        + "; ".join(named(k) for k in cand_only[:10]) + (" ..." if len(cand_only) > 10 else "")
                        + " (pass --allow-missing-points to gate only the shared ones)")
    failures = _Failures(failures)  # the comparability failures first; the points that lost items counted after
    for name, df in (("baseline", b), ("candidate", c)):
        for k, r in sorted(point_error_rates(df).items(), key=lambda kv: -kv[1]):
            if r > max_error_rate:
                sub = df[(df.point_key == k) & ~df.status.isin(NOT_FAILURES)]
                failures.append(f"{name} point {labels.get(k, k)} lost {r:.1%} of its items (cap "
                                f"{max_error_rate:.1%}): {sub.status.value_counts().to_dict()}")
                failures.lost += 1
    return failures, bq, cq, cand_only, base_only


def _judged_uncompared(b, c, shared: set, judged_gap: float) -> tuple[list[str], set]:
    """Points whose judged@10 differs between the runs by more than ``judged_gap`` (or is missing in one): their
    judged metrics are left uncompared, with a warning each (a system that finds new, unjudged passages looks
    worse until they are judged)."""
    warnings, uncompared = [], set()
    jb = b[(b.metric == "judged@10") & (b.status == "ok") & b.question_id.isin(shared)].groupby(
        ["strategy", "point_label"]).value.mean()
    jc = c[(c.metric == "judged@10") & (c.status == "ok") & c.question_id.isin(shared)].groupby(
        ["strategy", "point_label"]).value.mean()
    def _pts(df):
        d = df[["strategy", "point_label"]].drop_duplicates()
        return set(zip(d.strategy.tolist(), d.point_label.tolist()))
    in_both = _pts(b) & _pts(c)
    for point in sorted((set(jb.index) | set(jc.index)) & in_both):  # a point only one run has is said above
        vb, vc = jb.get(point), jc.get(point)
        if vb is None or vc is None or abs(vb - vc) > judged_gap:
            uncompared.add(point)
            warnings.append(f"{point[0]} [{point[1]}]: judged metrics not compared: judged@10 is "
                            f"{'none' if vb is None else f'{vb:.2f}'} in the baseline and "
                            f"{'none' if vc is None else f'{vc:.2f}'} in the candidate (gap over {judged_gap:.2f}); "
                            "judge the new passages (`ragwb judge CANDIDATE --export`) and gate again")
    return warnings, uncompared


def _point_bootstraps(joined, resamples: int, seed: int) -> dict:
    """(strategy, point, metric) -> its paired bootstrap of candidate - baseline over the shared questions."""
    # metrics of one point scored on the same questions share one bootstrap draw (the same numbers as
    # one bootstrap per metric: evals/stats.py paired_bootstrap_columns)
    boot = {}
    for (strategy, point), gp in joined.groupby(["strategy", "point_label"], sort=False):
        by_q: dict = {}
        for metric, g in gp.groupby("metric", sort=False):
            by_q.setdefault(tuple(g.question_id.tolist()), []).append((metric, g.b.to_numpy(), g.c.to_numpy()))
        for cols in by_q.values():
            res = paired_bootstrap_columns(np.column_stack([b for _, b, _ in cols]),
                                           np.column_stack([c for _, _, c in cols]), resamples, seed=seed)
            boot.update({(strategy, point, m): r for (m, _, _), r in zip(cols, res)})
    return boot


def to_markdown(res: dict, base_name: str, cand_name: str) -> str:
    head = "PASSED" if res["passed"] else "FAILED"
    cov = res.get("coverage", {})
    lines = ([res["index_difference"] + " (points still paired by question; their token costs are reported, gated "
              "only where --metrics names them)", ""] if res.get("index_difference") else []) + [
             f"### ragwb gate: {head}", "", f"baseline `{base_name}` vs candidate `{cand_name}`; non-ok rates "
             f"{res['error_rates']['baseline']:.1%} / {res['error_rates']['candidate']:.1%}", "",
             f"compared {cov.get('points_compared', '?')} of {cov.get('candidate_points', '?')} candidate points "
             f"(matched by parameters) on {cov.get('questions_compared', '?')} shared questions"
             + (f"; candidate only: {', '.join(cov['candidate_only'])}" if cov.get("candidate_only") else "")
             + (f"; baseline only: {', '.join(cov['baseline_only'])}" if cov.get("baseline_only") else ""), ""]
    if res["failures"]:
        lines += ["**Failures**", ""] + [f"- {f}" for f in res["failures"]] + [""]
    if res.get("warnings"):
        lines += ["**Not compared**", ""] + [f"- {w}" for w in res["warnings"]] + [""]
    if res.get("budgets"):  # every budget, met or not (the exceeded ones are failures above too)
        lines += ["**Budgets** (the candidate's point means, 95% intervals)", ""] + [
            f"- {budget_line(b)}" for b in res["budgets"]] + [""]
    if res.get("requires"):  # every K-of-N rule, met or not (the unmet ones are failures above too)
        from .judge_repeats import require_line

        lines += ["**Judgment rules** (--require, per question)", ""] + [
            f"- {require_line(r)}" for r in res["requires"]] + [""]
    if any(r["metric"] == "faithfulness" for r in res["rows"]):
        from evals.score.support import support_caption
        lines += [f"_faithfulness (offline): {support_caption()}_", ""]
    # n: the questions both sides scored for that row (a raced point's are the questions it answered)
    lines += ["| strategy | point | metric | n | baseline | candidate | delta | 95% CI | tolerance | verdict |",
              "|---|---|---|---:|---:|---:|---:|---|---:|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['strategy']} | {r['point']} | {r['metric']} | {r.get('n', '')} | {r['baseline']:.4f} | "
                     f"{r['candidate']:.4f} | {r['delta']:+.4f} | [{r['low']:+.4f}, {r['high']:+.4f}] | "
                     f"{r['tolerance']:.4f} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def compare_runs(store: ResultStore, base: str, cand: str) -> pd.DataFrame:
    """Paired deltas of two runs on the points they share (matched by parameters); ``.attrs["coverage"]``
    says how many points and questions were compared and which were left out."""
    b, c = store.run(base), store.run(cand)
    differs = index_difference(b.get("config"), c.get("config"), b.get("index_built"), c.get("index_built"))
    bq, cq = per_question(store, base), per_question(store, cand)
    # a comparison reads every quality metric both runs scored: the gate's set plus the LLM judges' metrics
    # (issue 83: the page's Compare showed 66 rows and no llm_ one)
    both = set(bq[1].metric.unique()) & set(cq[1].metric.unique())
    metrics = GATED_DEFAULT + [m for m in JUDGED_GATED + COMPARED_JUDGES if m in both]
    res = gate(bq, cq, metrics, resamples=1000, allow_missing_points=True, index_differs=differs)
    df = pd.DataFrame(res["rows"])
    df.attrs["coverage"] = {**res["coverage"], "index_difference": differs}
    return df


def _only(frame: tuple, keep: list | None) -> tuple:
    """(dataset, per-question scores) kept to the questions ``keep`` names (None: all of them)."""
    if keep is None:
        return frame
    ds, df = frame
    out = df[df.question_id.isin(set(keep))]
    out.attrs.update(df.attrs)
    return ds, out


def main_gate(a) -> int:
    res, bname, cid, _ = run_gate(a)
    return res["exit_code"] if res is not None else 0


def run_gate(a):
    """The gate as the CLI asks it: (result, baseline name, candidate id, candidate run) after writing the Markdown
    and the JSON verdict; (None, ...) for --write-baseline. Every output path is checked before the gate runs."""
    db = a.db or Path(a.workspace) / "results.duckdb"
    part = getattr(a, "questions", "tune")
    with ResultStore(db, read_only=True) as st:
        cid = st.resolve_run(a.candidate)
        keep = None  # --questions confirm: the confirm questions of the candidate run, else of the baseline run
        if part == "confirm":
            keep = st.confirm_questions(cid)
            if keep is None and a.baseline and not Path(a.baseline).is_file():
                keep = st.confirm_questions(st.resolve_run(a.baseline))
            if keep is None:
                raise ValueError(f"--questions confirm: neither the candidate run {cid} nor the baseline has confirm "
                                 "questions (a run made with --confirm SHARE|N has them)")
            print(f"gate on {len(keep):,} confirm questions (questions no tuning saw)", file=sys.stderr)
        cand = _only(per_question(st, cid, "all" if keep is not None else part), keep)
        crun = st.run(cid)
        if a.write_baseline:
            print(write_baseline(a.write_baseline, cand[0], cand[1], cid, crun))
            return None, "", cid, crun
        if not a.baseline:
            raise ValueError("--baseline is required (a run id or a baseline file)")
        if Path(a.baseline).is_file():  # the file carries its run's index (one written before it did: none said)
            base, bname = read_baseline(a.baseline), a.baseline
            brun = {"config": base[1].attrs.get("config"), "index_built": base[1].attrs.get("index_built")}
        else:
            bid = st.resolve_run(a.baseline)
            base, bname, brun = (_only(per_question(st, bid, "all" if keep is not None else part), keep), bid,
                                 st.run(bid))
        if keep is not None and Path(a.baseline).is_file():
            base = _only(base, keep)
        differs = (index_difference(brun.get("config"), crun.get("config"), brun.get("index_built"),
                                    crun.get("index_built")) if brun.get("config") else "")
    if a.metrics is not None:  # "f1,faithfulness" as `score --metrics` takes it, or "f1 faithfulness"
        a.metrics = [m.strip() for x in a.metrics for m in x.split(",") if m.strip()]
    if a.metrics and not getattr(a, "trust_judge", False):  # a judge at chance decides nothing (issue 85)
        from .judge_health import chance_judged

        with ResultStore(db, read_only=True) as st:
            why = chance_judged(crun, Path(st.path).parent, cand[1])
        bad = [why[m] for m in a.metrics if m in why]
        if bad:
            raise ValueError(f"--metrics: {bad[0]}")
    if a.metrics is not None:  # a mistyped metric in CI would gate nothing: every name must be known and scored
        scored = set(cand[1]["metric"].unique()) | set(base[1]["metric"].unique())
        unknown = [m for m in a.metrics if m not in METRICS and m not in scored]
        if unknown or not a.metrics:
            raise ValueError(f"--metrics: unknown metric(s) {', '.join(unknown) or '(none given)'}; valid: "
                             f"{', '.join(sorted(scored) or sorted(METRICS))}")
        absent = [m for m in a.metrics if m not in set(cand[1]["metric"].unique())]
        if absent:
            raise ValueError(f"--metrics: {', '.join(absent)} not scored in candidate run {cid}; scored there: "
                             f"{', '.join(sorted(set(cand[1]['metric'].unique())))}")
    tols = {}
    if a.tolerances:
        with open(a.tolerances, "rb") as f:
            tols = tomllib.load(f).get("tolerances", {})
    res = gate(base, cand, a.metrics, tols, a.max_error_rate, a.aa_noise, a.resamples, a.seed,
               a.allow_missing_points, a.judged_gap, index_differs=differs,
               budgets=getattr(a, "budgets", None) or [], requires=getattr(a, "requires", None) or [])
    md = to_markdown(res, bname, cid)
    print(md)
    if a.markdown:
        Path(a.markdown).write_text(md)
    out = Path(a.json_out) if a.json_out else Path(a.workspace) / "gate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=float))
    return res, bname, cid, crun
