"""The workbench's Index row (docs/sweeps.md, "Index axes"): chunker, chunk tokens, overlap, leaf and parent sizes
and the embedder as values to sweep; what each config must embed (and about how long, at this machine's measured
rate) before anything is embedded; then one stored run holding the applied budgets' points on every config, drawn
on one chart (one colour per strategy, the index settings in each point's label)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..run.index_grid import AXES, built_identity, index_of, label, same_index_built

# the form's fields, in the order the row shows them
FIELDS = ["chunker", "chunk_tokens", "overlap", "leaf_min", "leaf_max", "parent_max", "embedder"]


def form_axes(values: dict | None) -> dict:
    """The Index form's text fields ("64,128") as index axes; an empty field is not an axis. A value that is not
    one the setting takes is an error naming it (``check_axes`` names the valid ones)."""
    from ..run.index_grid import check_axes

    axes = {}
    for k, raw in (values or {}).items():
        if k not in AXES:
            continue
        items = [x.strip() for x in (",".join(raw) if isinstance(raw, (list, tuple)) else str(raw or "")).split(",")
                 if x.strip()]
        if not items:
            continue
        if k in ("chunker", "embedder"):
            axes[k] = items
        else:
            try:
                axes[k] = [int(x) for x in items]
            except ValueError:
                raise ValueError(f"index.{k} must be {AXES[k]}, got {raw!r}") from None
    return check_axes(axes)


@dataclass
class IndexPlan:
    variants: list  # [(tag, IndexConfig)]
    table: pd.DataFrame  # one row per config: settings, chunks to embed, seconds, built
    chunks: int = 0
    seconds: float = 0.0
    answer_items: int = 0  # items of the sweep (answer calls at most, with an LLM; cached ones are free)
    notices: list = None  # configs merged (the same chunks), settings a chunker never reads
    judge_calls: dict = None  # judge name -> calls at most (an item's answer is not known yet; cached ones are free)
    judge_model: str = ""
    exact: object = None  # every config built: the calls counted prompt by prompt (call_plan.AnswerPlan)

    def line(self, model: str = "") -> str:
        n = len(self.variants)
        emb = (f"{self.chunks:,} chunk(s) to embed first (about {self.seconds / 60:.1f} min at this machine's rate)"
               if self.chunks else "nothing to embed (every config built, or its texts cached)")
        calls = (f"; up to {self.answer_items:,} answer call(s) to {model} (the response cache answers the ones "
                 "asked before)" if model else f"; {self.answer_items:,} item(s) answered offline")
        notes = "".join(f". {x[0].upper()}{x[1:]}" for x in self.notices or [])
        if self.exact is not None:  # every config is built: counted prompt by prompt, as Apply's line (item 17)
            return f"{n} index config(s): {emb}; " + "; ".join(self.exact.call_parts(model)) + notes
        if self.judge_calls:  # the page's judges judge every config's items, as Apply's (issue 72)
            calls += (f"; up to {sum(self.judge_calls.values()):,} judge call(s) to {self.judge_model} ("
                      + ", ".join(f"{k} {v:,}" for k, v in self.judge_calls.items())
                      + "; none for an abstention or a cached verdict)")
        return f"{n} index config(s): {emb}{calls}{notes}"


def plan_index_sweep(sess, workspace: str, axes: dict, points: list, limit: int) -> IndexPlan:
    """What an index sweep of the applied points would cost before anything runs: per config the chunks it must
    embed (a text an earlier config or run embedded with the same embedder is not counted) and the time at the rate
    measured here; and the items to answer."""
    from rag.index.rates import estimate_seconds
    from rag.index.workspace import Workspace

    from ..run.index_grid import fold_fixed

    from ..run.index_grid import dataset_variants

    from ..run.plan import check_grid_size, check_points, grid_count

    # the run's one cap, before a config is chunked: index configs x every applied point (two points of one
    # strategy are two points: a dict keyed by strategy counted them once)
    check_grid_size({}, axes)  # the index configs' own cap
    check_points(grid_count({}, axes)[1]["index config(s)"] * len(points),
                 f"index configs x {len(points):,} applied point(s)")
    ws = Workspace(workspace)
    base, axes = fold_fixed(sess.retriever.reader.config, axes)  # one value: the index of every point, not an axis
    ds = sess.dataset
    # configs that build the same chunks on this corpus are one config (a sweep that builds one index is refused)
    variants, notices = dataset_variants(ds, base, axes)
    rows, counted, total, secs, uses = [], set(), 0, 0.0, []
    for tag, ic in variants:
        work = ws.embed_work(ds, ic)
        new = [k for k in work if k not in counted]
        counted.update(work)
        est, src = estimate_seconds(workspace, ic.embedder.name, len(new), sum(work[k] for k in new))
        total += len(new)
        secs += est
        # the index the run would use: a built twin that holds the same chunks is reused, not built again (the
        # hierarchy row said "built: no" after its run: issue 83, item 17)
        used = same_index_built(ws, ds, ic, say=False)
        uses.append(used)
        built = ws.has_table(f"{ws.index_name(ds.name, used)}__documents")
        ident = built_identity(ic, ds.documents)
        modes = " and ".join(ident["modes"])
        # a setting this config's chunker never reads is said as such, never shown as if it applied (hierarchy's
        # chunk_tokens 64)
        rows.append({"index config": label(index_of(tag)) or "as loaded", "chunker": ic.chunking.chunker,
                     **{k: str(getattr(ic.chunking, k)) if k in ident else f"not read ({modes})"
                        for k in ("chunk_tokens", "overlap")},
                     "embedder": ic.embedder.name,
                     "built": ("yes" if used is ic else f"yes (as {ws.index_name(ds.name, used)})") if built else "no",
                     "chunks to embed": len(new), "about": f"{est:,.0f} s", "rate": src})
    qs = ds.questions[:limit] if limit else ds.questions
    items = len(variants) * len(points) * len(qs)
    judges = list(getattr(sess.evaluator, "judges", []) or [])
    from evals.score.metrics import needs_autorater

    # the sufficiency autorater is asked only where no gold evidence decides it (as `ragwb run`'s line counts)
    auto = len(variants) * len(points) * sum(map(needs_autorater, qs))
    jcalls = {j.name: (auto if j.name == "llm_context_sufficiency" else items) for j in judges}
    exact = None
    if sess.client is not None and rows and all(r["built"] != "no" for r in rows):
        exact = _count_built(sess, ws, uses, points, qs, limit)
    return IndexPlan(variants, pd.DataFrame(rows), total, secs, items,
                     [n.removeprefix("notice: ") for n in notices], jcalls,
                     judges[0].client.cfg.model if judges else "", exact)


def _count_built(sess, ws, uses: list, points: list, qs: list, limit: int):
    """The answer and judge calls of the sweep, counted prompt by prompt where every config's index is built (after
    its run: the plan said "up to 180 answer / 540 judge call(s)" while a second press sent 0: issue 83, item 17).
    ``uses``: the index config each variant runs on (a built twin where one holds its chunks). None where a config
    cannot be counted (a plugin that fails to build)."""
    import dataclasses

    from rag.llm.client import price_known

    from ..run.call_plan import AnswerPlan, count_point
    from ..run.items import build_parts
    from .session import session_run_config

    out, planned = AnswerPlan(), set()
    shapes = [(n, kw) for n, kw in points if n not in sess.evaluator.systems]
    try:
        cfg = session_run_config(sess, limit=limit, prices={k: tuple(v) for k, v in sess.client.prices.items()})
        for used in uses:
            parts = build_parts(dataclasses.replace(cfg, index=used), ws, ws.index_name(sess.dataset.name, used))
            out.price_known = price_known(parts.llm.cfg.model, parts.llm.prices)
            for name, kw in shapes:
                out.items += len(qs)
                count_point(out, parts.evaluator, parts.llm, parts.retriever, name, kw, list(qs), planned,
                            probe=False)
    except Exception:  # noqa: BLE001 - the bound above stands where the exact count cannot be made
        return None
    return out


def run_index_sweep(sess, db: str, workspace: str, axes: dict, points: list, limit: int,
                    prices: dict | None = None) -> str:
    """The applied points on every index config as one stored run (each config built first); returns its id."""
    from ..run.runner import run_evaluation

    points = [(n, kw) for n, kw in points if n not in sess.evaluator.systems]  # a deployed service has no index
    if not points:
        raise ValueError("pick at least one strategy to sweep the index over")
    grid: dict = {}
    for name, kw in points:
        grid.setdefault(name, {k: [v] for k, v in kw.items()})
    from ..run.index_grid import fold_fixed

    index, axes = fold_fixed(sess.retriever.reader.config, axes)
    from .session import session_run_config

    # the session's answerer and judges, its dataset by absolute path (the same rule as Save and Race)
    cfg = session_run_config(sess, index=index, grid=grid, limit=limit, prices=dict(prices or {}), index_grid=axes)
    return run_evaluation(cfg, workspace, db, progress=False).run_id


def best_config(db: str, run_id: str, metric: str) -> tuple[list[str], list[str]]:
    """What `ragwb best RUN --metric M` says of a stored run, in two parts: the prose (the best point with its
    interval, the runner-up it beat or the points tied with it) and each chosen point's whole configuration as TOML
    that `ragwb run --config` takes as pasted."""
    from ..analyze.best import choose, render_parts
    from ..store import ResultStore

    return best_choice(db, run_id, metric)[:2]


def best_choice(db: str, run_id: str, metric: str | None) -> tuple[list[str], list[str], dict | None]:
    """``best_config``'s prose and TOML, and ``ragwb best --json``'s object (None for a front). ``metric`` None: the
    run's own (the one it raced or confirmed on), else the first headline quality metric with values there (plain
    questions have no f1: issue 83)."""
    from ..analyze.best import choice_json, choose, default_metric, render_parts
    from ..store import ResultStore

    with ResultStore(db, read_only=True) as st:
        ch = choose(st, run_id, metric or default_metric(st, run_id))
    prose, tomls = render_parts(ch)
    return prose, tomls, (choice_json(ch) if not ch.front else None)
