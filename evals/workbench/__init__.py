"""The workbench as a Python object, for Jupyter, VS Code and marimo cells: ``Workbench("squad2")``.

It is the page without the page: the same library calls the marimo workbench makes (``calls``, the facade both use, in this room), so a
frame, a figure or a cost line here is the one the page shows for the same budgets. Every call that would spend
(an LLM answerer, a judge, a deployed service, Generate) first returns its cost line and sends only when told
(``send=True``), counted against the same response cache as the page and ``ragwb run``. Nothing here runs an
event loop of its own on the caller's thread (no ``asyncio.run``): it works inside Jupyter's running loop.

    from evals.workbench import Workbench
    wb = Workbench("squad2", limit=50)          # a bundled set, offline
    wb.apply(chunks__top_k=4)                   # the budget form's Apply: the cost line, then the items
    wb.figure()                                 # the quality-vs-cost chart (a plotly Figure)
    wb.rows()                                   # one row per question and point, a column per metric
    wb.summary()                                # per point and metric: mean, 95% interval, n

docs/jupyter.md has the rest (sweep, race, save, best, judge agreement, generate, controls).
"""
from __future__ import annotations

from .object import Workbench  # noqa: F401
from .results import Applied, Best, CostLine, chosen_metric, quality_figure, wide_rows  # noqa: F401
