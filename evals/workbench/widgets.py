"""The page's budget form in a Jupyter notebook (JupyterLab, Notebook 7, VS Code): ipywidgets controls over a
``Workbench``. Apply redraws the quality-vs-cost chart and the question matrix in place; where an Apply would send
calls (an LLM answerer, a judge, a deployed service) its cost line and a Send button come first, as in the page.

Why ipywidgets and not anywidget: the controls are plain form widgets (a multi-select, sliders, buttons) that
ipywidgets already draws in every Jupyter front end with no JavaScript of ours, and marimo has its own native
controls for the page, so an anywidget (JavaScript we would write and ship) would buy nothing here. The controls
call the same ``Workbench`` methods a cell would (``plan``, ``apply``, ``figure``, ``matrix``): no second
implementation. ``pip install 'rag-workbench[jupyter]'`` brings ipywidgets."""
from __future__ import annotations

TOP_K = {"chunks": "chunks__top_k", "hybrid": "hybrid__top_k", "full_documents": "full_documents__top_k",
         "parent_child": "parent_child__top_k"}


def _widgets():
    try:
        import ipywidgets
    except ImportError as e:  # an optional extra: one line saying which
        raise ImportError("the Jupyter controls need ipywidgets: pip install 'rag-workbench[jupyter]'") from e
    return ipywidgets


class Controls:
    """The budget form: ``Controls(wb).widget`` is what a cell displays."""

    def __init__(self, wb, strategies: list[str] | None = None):
        import dataclasses

        from rag.strategies import get_strategy

        w = _widgets()
        self.wb = wb
        names = list(strategies) if strategies is not None else list(wb.strategies)
        self.strategies = w.SelectMultiple(options=list(wb.strategies), value=tuple(names), description="strategies",
                                           rows=min(7, len(wb.strategies)))
        self.top_k = {}
        for name, key in TOP_K.items():
            if name in wb.strategies:
                default = get_strategy(name).Params().top_k
                self.top_k[key] = w.IntSlider(value=default, min=1, max=max(60, default), description=f"{name} top_k",
                                              continuous_update=False, style={"description_width": "initial"})
        fields = {f.name for f in dataclasses.fields(get_strategy("chunks").Params)}
        self.max_tokens = (w.IntSlider(value=0, min=0, max=8000, step=250, description="max_context_tokens",
                                       continuous_update=False, style={"description_width": "initial"})
                           if "max_context_tokens" in fields else None)
        self.apply_button = w.Button(description="Apply budgets", button_style="primary")
        self.send_button = w.Button(description="Send", button_style="warning",
                                    layout=w.Layout(display="none"))
        self.cost = w.HTML()
        self.chart = w.Output()
        self.matrix = w.Output()
        self.status = w.HTML()
        self.applies = 0  # completed Applies (a test reads it; the chart's faded points are the earlier ones)
        self.apply_button.on_click(lambda _b: self.on_apply())
        self.send_button.on_click(lambda _b: self.on_apply(send=True))
        sliders = list(self.top_k.values()) + ([self.max_tokens] if self.max_tokens else [])
        self.widget = w.VBox([w.HBox([self.strategies, w.VBox(sliders)]),
                              w.HBox([self.apply_button, self.send_button]), self.cost, self.status,
                              self.chart, self.matrix])
        self.on_apply()  # the shipped budgets, as the page opens on them (offline: evaluated at once)

    def budgets(self) -> dict:
        out = {key: s.value for key, s in self.top_k.items()}
        if self.max_tokens is not None:
            out["max_context_tokens"] = self.max_tokens.value
        return out

    def on_apply(self, send: bool = False) -> None:
        """Apply (or Send): the cost line first; evaluated at once when it sends nothing or when Send is pressed."""
        from rag.safeio import html_text

        try:
            result = self.wb.apply(list(self.strategies.value), self.budgets(), send=send)
        except (ValueError, KeyError, RuntimeError) as e:
            self.status.value = f"<b style='color:#b00'>{html_text(e.args[0] if e.args else e)}</b>"
            return
        self.cost.value = f"<small>{html_text(result.cost.text)}</small>"
        if not result.evaluated:
            self.send_button.description = f"Send {result.cost.calls:,} call(s)"
            self.send_button.layout.display = ""
            self.status.value = "Nothing sent yet: press <b>Send</b> to answer the new items."
            return
        self.send_button.layout.display = "none"
        self.applies += 1
        self.redraw()

    def redraw(self) -> None:
        from IPython.display import display

        from rag.safeio import html_text

        metric, note = self.wb.quality_metric()  # plain text: escaped for the widget's HTML here
        self.status.value = f"<small>{html_text(note)}</small>" if note else ""
        with self.chart:
            self.chart.clear_output(wait=True)
            # plotly's own mime bundle: JupyterLab, Notebook 7 and VS Code draw it with their plotly renderer
            # (plotly ships its JupyterLab extension), nothing fetched
            display(self.wb.figure(metric))
        with self.matrix:
            self.matrix.clear_output(wait=True)
            display(self.wb.matrix(metric).head(50))
