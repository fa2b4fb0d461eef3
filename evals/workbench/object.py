"""The Workbench object (``evals.workbench.Workbench``): one dataset opened as the page opens it; the package's
docstring says how it is used."""
from __future__ import annotations

import contextlib

import pandas as pd


from .results import Applied, Best, CostLine, chosen_metric, quality_figure, wide_rows  # noqa: F401


def _argv(dataset: str, kwargs: dict) -> list[str]:
    """Keyword arguments as the page's command line (the flags after ``marimo run ... --``), so the object and
    the page read them with one parser: ``llm=(URL, MODEL)``, ``judge=(URL, MODEL)`` or ``"none"``, and any page
    flag by its name (``llm_base_url=``, ``price=["m=1,2"]``, ``concurrency=8``)."""
    argv = ["--dataset", str(dataset)]
    kwargs = dict(kwargs)
    llm = kwargs.pop("llm", None)
    if llm is not None:
        base, model = _pair(llm, "llm")
        argv += ["--llm-base-url", base, "--llm-model", model]
    judge = kwargs.pop("judge", None)
    if isinstance(judge, str):
        argv += ["--judge", judge]
    elif judge is not None:
        base, model = _pair(judge, "judge")
        argv += ["--judge-base-url", base, "--judge-model", model]
    for key, value in kwargs.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, str(v)]
        else:
            argv += [flag, str(value)]
    return argv


def _pair(value, what: str) -> tuple[str, str]:
    if isinstance(value, dict):
        value = (value.get("base_url"), value.get("model"))
    if hasattr(value, "base_url") and hasattr(value, "model"):
        value = (value.base_url, value.model)
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) and v for v in value)):
        raise ValueError(f"{what}= takes (base_url, model), e.g. ('http://127.0.0.1:8080/v1', 'my-model')")
    return value[0], value[1]


def _budgets(budgets: dict | None, kw: dict) -> dict:
    """Budgets as the page's form names them (``chunks__top_k``); ``chunks.top_k`` is taken too."""
    out = {}
    for key, value in {**(budgets or {}), **kw}.items():
        out[key.replace(".", "__")] = value
    return out


class Workbench:
    """One dataset opened as the page opens it, with its answerer and judge; the state of an Apply is kept here
    (``last``), so ``rows``, ``summary``, ``figure``, ``matrix``, ``compare``, ``sufficiency`` and ``save`` speak
    of the last applied budgets, as the page's cells do.

    ``dataset``: a bundled set (``squad2``), a folder of your documents (ingested on first open) or the name of a
    folder the workspace holds. ``questions``: a JSONL questions file for a folder (remembered). ``limit``: the
    questions evaluated. ``llm=(base_url, model)``: an LLM answerer (it judges too unless ``judge="none"`` or
    ``judge=(base_url, model)``). Any other flag of the page by name (``price=["m=0.15,0.6"]``, ``workspace=``,
    ``system=["v1=https://rag/ask"]``, ``plugins=["my_strategies.py"]``). A bad one is a ValueError naming it."""

    def __init__(self, dataset: str = "squad2", *, progress: bool = True, **flags):
        from evals.workbench import datasets as dsets

        parsed = dsets.workbench_args(_argv(dataset, flags))
        if parsed.error:
            raise ValueError(parsed.error)
        self.flags = parsed
        self.args = parsed.args
        self.progress = progress
        from rag.strategies import default_strategies, load_plugins

        load_plugins(self.args.plugins)
        self.spec = dsets.resolve_dataset(self.args.dataset, self.args.workspace)
        self._open()
        self.strategies = list(default_strategies()) + [x.name for x in parsed.systems]
        self.last: Applied | None = None
        self.history: list = []  # the summaries of earlier Applies: the chart's faded points

    # ---- opening
    def _open(self) -> None:
        from . import calls as interactive
        from evals.workbench.answering import OFFLINE

        cost = interactive.ingest_cost(self.spec, self.args.workspace, self.args.embedder)
        bar = None
        if cost["chunks"]:
            print(f"{self.spec}: embedding {cost['chunks']:,} chunks with {self.args.embedder} first, about "
                  f"{cost['seconds']:.0f} s ({cost['source']}; once: later opens embed nothing)")

        def embedded(n, total):
            nonlocal bar
            if bar is None:
                bar = _bar(total, f"embedding {self.spec}", self.progress)
            bar.update(n)

        try:
            self.base = interactive.open_session(self.spec, self.args.workspace, self.args.embedder,
                                                 on_progress=embedded, questions=self.args.questions,
                                                 systems=self.flags.systems)
        finally:
            if bar is not None:
                bar.close()
        for sk in self.base.dataset.skipped:  # a left-out file or gold line is said, never silently dropped
            where = f"{sk.path}" + (f" line {sk.line}" if sk.line else "")
            print(f"{'skipped' if sk.kind == 'skipped' else 'warning'}: {where}: {sk.reason}")
        self._sessions: dict = {}
        wb = self.flags
        choice = f"LLM: {wb.llm.model}" if wb.llm else OFFLINE
        self.session = interactive.session_for_answerer(self._sessions, self.base, choice, wb.llm, wb.prices,
                                                        wb.judge)

    @property
    def dataset(self):
        return self.session.dataset

    @property
    def limit(self) -> int:
        return min(self.args.limit, len(self.session.dataset.questions))

    def __repr__(self) -> str:
        d = self.session.dataset
        return (f"Workbench({d.name!r}: {len(d.documents):,} documents, {len(d.questions):,} question(s); answerer "
                f"{self.session.answerer_label}; strategies {', '.join(self.strategies)})")

    # ---- the budget form
    def points(self, strategies: list[str] | None = None, budgets: dict | None = None, **kw) -> list:
        """The points an Apply evaluates: one per strategy, with only the budgets that differ from its shipped
        defaults (the page's ``points_from_budgets``; a budget no strategy has is a ValueError naming the valid)."""
        from . import calls as interactive

        names = list(strategies) if strategies is not None else list(self.strategies)
        unknown = [s for s in names if s not in self.strategies]
        if unknown:
            raise ValueError(f"unknown strategy {', '.join(map(repr, unknown))}; valid: {', '.join(self.strategies)}")
        systems = [x.name for x in self.flags.systems]
        return interactive.points_from_budgets(names, _budgets(budgets, kw), systems=systems)

    def plan(self, strategies: list[str] | None = None, budgets: dict | None = None, limit: int | None = None,
             **kw) -> CostLine:
        """The cost line of applying these budgets, counted before anything is sent (the page's line)."""
        return self._cost(self.points(strategies, budgets, **kw), limit or self.limit, "wb.apply(..., send=True)")[0]

    def _cost(self, points: list, limit: int, how: str) -> tuple[CostLine, int]:
        """(the cost line of evaluating ``points``, the new items it counts): one count, as the page's."""
        from . import calls as interactive

        plan = interactive.answer_plan(self.session, points, limit)
        model = self.session.client.cfg.model if self.session.client is not None else ""
        text = f"{self.session.answerer_label}: {plan.line(model)}" + (" " + "; ".join(plan.notes) if plan.notes
                                                                         else "")
        # the price hint in this object's words, not the CLI flag's (issue 83)
        text = text.replace("(--price MODEL=IN,OUT)", "(Workbench(..., price=['MODEL=IN,OUT']))")
        return CostLine(text, plan.calls + plan.service_requests, sent=False, how=how), plan.items

    def apply(self, strategies: list[str] | None = None, budgets: dict | None = None, limit: int | None = None,
              send: bool = False, **kw) -> Applied:
        """The page's Apply: ``chunks__top_k=4``, ``max_context_tokens=1500``, ``hybrid__alpha=0.5`` (or
        ``budgets={"chunks.top_k": 4}``). Offline it evaluates at once; where it would send calls it returns the
        cost line and sends only with ``send=True``."""
        points = self.points(strategies, budgets, **kw)
        limit = limit or self.limit
        result = self._evaluate(points, limit, send, "wb.apply(..., send=True)")
        if result.evaluated:
            if self.last is not None and self.last.summary is not None and len(self.last.summary):
                self.history = (self.history + [self.last.summary])[-40:]
            self.last = result
        return result

    def _evaluate(self, points: list, limit: int, send: bool, how: str) -> Applied:
        from . import calls as interactive, page

        if not self.session.dataset.questions:  # a folder with no questions: said, as the page says it
            raise ValueError(page.no_questions_message(self.session, markdown=False))

        cost, items = self._cost(points, limit, how)
        if cost.calls and not send:
            return Applied(cost, points, limit=limit)
        bar = _bar(items, "evaluating", self.progress and items > 0)
        try:
            scores = interactive.evaluate_points(self.session, points, limit, on_item=bar.update)
        finally:
            bar.close()
        summary = interactive.summarize_session(self.session, scores)
        cost.sent = True
        return Applied(cost, points, scores, summary, limit=limit)

    def _applied(self) -> Applied:
        if self.last is None:
            raise RuntimeError("nothing applied yet: wb.apply() first (offline it evaluates at once)")
        return self.last

    # ---- what the page shows of the last Apply
    def scores(self) -> pd.DataFrame:
        """The page's ``rows``: the long frame, one row per question x point x metric with value, status, detail."""
        return self._applied().scores

    def rows(self) -> pd.DataFrame:
        """One row per question and point, a column per metric."""
        return self._applied().rows()

    def summary(self) -> pd.DataFrame:
        """Per point and metric: mean, its 95% bootstrap interval and n (the page's headline, unformatted)."""
        return self._applied().summary

    def projection(self, questions: int = 10_000) -> pd.DataFrame:
        """What each applied point would cost on ``questions`` questions: its mean tokens and dollars a question on
        these questions, times that many; dollars "unknown" where the model has no price (never $0)."""
        from evals.workbench import page

        return page.cost_projection(self.summary(), questions, self.session.client is not None)

    def headline(self) -> pd.DataFrame:
        """The page's headline table: "mean [low, high] n=K" per metric, as ``ragwb show`` prints it."""
        from evals.analyze.summary import HEADLINE, headline_table
        from evals.workbench import page

        s = self.summary()
        table, _ = page.headline(s, headline_table, page.headline_order(s, HEADLINE))
        return table

    def figure(self, metric: str | None = None, cost: str = "context_tokens", history: bool = True):
        """The quality-vs-cost chart (plotly Figure): Pareto front ringed, earlier Applies faded. ``metric``:
        the quality axis (default f1, moved to a metric with values here, as the page moves it)."""
        hist = pd.concat(self.history, ignore_index=True) if history and self.history else None
        fig, _, _ = quality_figure(self.summary(), metric, cost, hist)
        return fig

    def quality_metric(self, metric: str | None = None) -> tuple[str, str]:
        """(the metric the chart shows for ``metric``, the note saying why it moved, "" when it did not), the note
        as plain text (the page's Markdown marks, ``**`` and escapes, are the page's: issue 83)."""
        import html

        shown, note = chosen_metric(self.summary(), metric)
        return shown, html.unescape(note.replace("**", "").replace("`", ""))

    def matrix(self, metric: str | None = None, **filters) -> pd.DataFrame:
        """The question x point matrix (a row per question, a column per point, spread and failures); filters as
        the page's: ``disagree=True``, ``failures=True``, ``unanswerable=True``, ``field=``, ``value=``,
        ``search=``."""
        from evals.workbench import page

        metric = metric or self.quality_metric()[0]
        judged = self.judged_scores()
        matrix, _, _, _ = page.matrix_view(self.scores(), judged, self.session.dataset.questions, metric, filters)
        return matrix

    def judged_scores(self) -> pd.DataFrame:
        from . import calls as interactive

        return interactive.session_judged_scores(self.args.db, self.session, self.scores())

    def point_names(self) -> list[str]:
        from evals.analyze import explore

        return explore.points_of(self.scores())

    def compare(self, a: str | None = None, b: str | None = None, metric: str | None = None) -> pd.DataFrame:
        """Point ``b`` against point ``a`` of the last Apply, paired per question: delta, 95% interval, verdict
        (default: the first two points)."""
        from evals.analyze import explore
        from evals.workbench import page

        pts = self.point_names()
        a = explore.pick_point(pts, a) if a else pts[0]
        b = explore.pick_point(pts, b) if b else pts[min(1, len(pts) - 1)]
        return explore.paired_points(self.scores(), a, b, page.paired_metrics(self.scores()),
                                     first=metric or self.quality_metric()[0])

    def sufficiency(self) -> pd.DataFrame:
        """Why points lose: context sufficiency x answer outcome per point (empty where nothing has a sufficiency
        value)."""
        from evals.analyze.sufficiency import decomposition, decomposition_table, has_sufficiency

        sc = self.scores()
        if not len(sc) or not has_sufficiency(sc):
            return pd.DataFrame()
        return decomposition_table(decomposition(sc))

    def sufficiency_figure(self):
        from evals.workbench import page

        return page.sufficiency_bar(self.scores())

    def budgets_table(self) -> pd.DataFrame:
        from . import calls as interactive

        return interactive.applied_budgets_table(self._applied().points)

    def search(self, query: str, strategy: str = "hybrid", budgets: dict | None = None) -> pd.DataFrame:
        """The blocks ``strategy`` returns for ``query`` (``ragwb search``; nothing stored)."""
        from . import calls as interactive

        return interactive.search_frame(self.session, query, strategy, _budgets(budgets, {}))

    # ---- sweeps, races, runs
    def sweep(self, param: str, values, strategies: list[str] | None = None, budgets: dict | None = None,
              send: bool = False, confirm=None, metric: str | None = None, **kw):
        """One budget over ``values`` ("2,4,8" or [2, 4, 8]) for each strategy, the others as applied; its cost
        line first where it would send. ``confirm`` (a share such as 0.3, or a count of questions): a stored run
        whose grid tunes on the rest and whose pick on ``metric`` is scored on the questions set aside; returns
        ``Best`` of that run (its confirm figures in ``.confirm``)."""
        from . import calls as interactive

        vals = values if isinstance(values, str) else ",".join(map(str, values))
        names = list(strategies) if strategies is not None else [s for s in self.strategies if _has(s, param)]
        points = interactive.sweep_points(names, param, vals, _budgets(budgets, kw))
        if not confirm:
            return self._evaluate(points, self.limit, send, "wb.sweep(..., send=True)")
        metric = metric or (self.quality_metric()[0] if self.last is not None else "f1")
        interactive.confirm_part(confirm, metric)  # a bad share is refused before the cost line
        cost = self._cost(points, self.limit, "wb.sweep(..., confirm=..., send=True)")[0]
        cost.text += "; with confirm questions set aside: a stored run, at most these calls"
        if cost.calls and not send:
            return cost
        with _run_log():
            rid = interactive.sweep_stored(self.session, self.args.db, self.args.workspace, names, param, vals,
                                           _budgets(budgets, kw), self.limit, metric, confirm,
                                           prices=self.flags.prices)
        print(f"stored run {rid}")
        return self.best(rid, metric)

    def race(self, param: str, values, strategies: list[str] | None = None, metric: str | None = None,
             budgets: dict | None = None, send: bool = False, batch: int = 50, confirm=None, **kw):
        """The sweep raced as a stored run: points clearly worse than the leader leave as batches land. Returns
        the cost line (an upper bound: a race asks less) until ``send=True``, then (run id, line, leaderboard).
        ``confirm`` (a share or a count of questions): set aside; the winner is scored on them after the race."""
        from . import calls as interactive

        vals = values if isinstance(values, str) else ",".join(map(str, values))
        names = list(strategies) if strategies is not None else [s for s in self.strategies if _has(s, param)]
        points = interactive.sweep_points(names, param, vals, _budgets(budgets, kw))
        cost = self._cost(points, self.limit, "wb.race(..., send=True)")[0]
        cost.text = cost.text.replace(" answer call(s)", " answer call(s) at most")
        if cost.calls and not send:
            return cost
        metric = metric or (self.quality_metric()[0] if self.last is not None else "f1")
        with _run_log():
            rid = interactive.race_budgets(self.session, self.args.db, self.args.workspace, names, param, vals,
                                           _budgets(budgets, kw), self.limit, metric, batch=batch,
                                           prices=self.flags.prices, confirm=confirm)
        line, board = interactive.race_result(self.args.db, rid)
        return rid, line, board

    def save(self, run_id: str | None = None) -> str:
        """Save as run: the last Apply's items stored (nothing evaluated again) with its HTML report; the run id."""
        from . import calls as interactive

        applied = self._applied()
        rid, report, why = interactive.save_with_report(self.session, self.args.db, applied.points, applied.limit,
                                                        self.args.workspace, run_id)
        print(f"saved run {rid}" + (f"; report {report}" if report else f"; the report was not written: {why}"))
        return rid

    def runs(self) -> pd.DataFrame:
        from . import calls as interactive

        return interactive.list_runs(self.args.db)

    def stored_summary(self, run_id: str) -> pd.DataFrame:
        from . import calls as interactive

        return interactive.stored_summary(self.args.db, run_id)

    def best(self, run_id: str, metric: str | None = None) -> "Best":
        """The best point of a stored run (a Save, a race): the prose, and its config as TOML for ``ragwb run
        --config``."""
        from evals.workbench.index_sweep import best_choice

        from evals.store import ResultStore

        with ResultStore(self.args.db, read_only=True) as st:
            rid = st.resolve_run(run_id)
        # no metric named: the run's own (raced or confirmed on), else its first headline quality metric with values
        # (plain questions have no f1: issue 83)
        prose, tomls, figures = best_choice(self.args.db, rid, metric)
        return Best(prose, tomls, figures)

    # ---- the judge and generated questions
    def judge_lines(self) -> list[str]:
        """How far to trust each judge of this workbench (its stored agreement with people), as ``ragwb show``."""
        from . import calls as interactive

        return interactive.judge_lines(self.session, self.args.workspace)

    def measure_judge(self, send: bool = False):
        """How far to trust the judge: its agreement with human labels. The cost line until ``send=True``, then
        the stored agreement line."""
        from . import calls as interactive, page

        plan = interactive.agreement_plan(self.session, self.args.workspace)
        cost = CostLine(plan["line"].replace("**", ""), plan["calls"], how="wb.measure_judge(send=True)")
        if plan["calls"] and not send:
            return cost
        if not any(j.name == "llm_faithfulness" for j in page.session_judges(self.session)):
            return cost
        return interactive.measure_agreement(self.session, self.args.workspace, progress=_tqdm_auto(self.progress))

    def generate(self, n: int = 20, types: str = "single", out: str = "", model: str = "", seed: int = 0,
                 language: str = "auto", send: bool = False, evaluate: bool = True):
        """Gold questions an LLM writes from this dataset's passages (``ragwb generate``). The cost line until
        ``send=True``; then the file is written, remembered for a folder, and (``evaluate``) the workbench reopens
        on it, so the next Apply evaluates them."""
        from evals.workbench import generating

        if self.flags.llm is None:
            raise ValueError("generate needs an LLM: Workbench(..., llm=(base_url, model))")
        client = generating.generator_client(self.session, self.flags.llm, model, self.flags.prices)
        plan = generating.generate_plan(self.session, client, int(n), [t.strip() for t in types.split(",")], seed, out,
                                        language)
        cost = CostLine(f"Generate: {plan.line()}", plan.new_calls, how="wb.generate(..., send=True)")
        if plan.new_calls and not send:
            return cost
        bar = _bar(plan.jobs, f"asking {client.cfg.model} for questions", self.progress)
        try:
            path, line = generating.generate_for_page(self.session, client, int(n),
                                                      [t.strip() for t in types.split(",")], seed, plan.out,
                                                      progress=bar, language=language)
        finally:
            bar.close()
        if evaluate:
            self.args.questions = str(path)
            self._open()
            self.last, self.history = None, []
        return line

    # ---- controls
    def controls(self, strategies: list[str] | None = None):
        """The page's budget form as Jupyter widgets (ipywidgets; ``pip install 'rag-workbench[jupyter]'``):
        strategies, top_k and token-budget controls and Apply; an Apply redraws the chart and the matrix in place,
        and with an LLM the cost line and a Send button come first."""
        from .widgets import Controls

        return Controls(self, strategies).widget


def _has(strategy: str, param: str) -> bool:
    import dataclasses

    from rag.strategies import STRATEGIES, get_strategy

    return strategy in STRATEGIES and param in {f.name for f in dataclasses.fields(get_strategy(strategy).Params)}


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


@contextlib.contextmanager
def _run_log():
    """A stored run's console log (the index it opened, each commit, each raced-out point) kept out of the notebook:
    the result says what it decided. Shown whole when the run fails, so nothing it said is lost."""
    import io
    import sys

    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            yield
    except BaseException:
        sys.stderr.write(buf.getvalue())
        raise


def _tqdm_auto(show: bool):
    """The bar class a long call draws with: ``tqdm.auto`` (a widget in Jupyter, text in a terminal), or one that
    draws nothing (``progress=False``)."""
    import functools

    from tqdm.auto import tqdm

    return functools.partial(tqdm, disable=not show)


def _bar(total: int, desc: str, show: bool):
    """A tqdm bar that renders as a widget in Jupyter (``tqdm.auto``) and as text in a terminal."""
    if not show or not total:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _NoBar()
    from rag.safeio import printable

    return tqdm(total=total, desc=printable(desc), leave=False)


__all__ = ["Workbench", "CostLine", "Applied", "Best", "wide_rows"]
