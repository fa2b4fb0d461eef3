"""The notebooks' calls under their first name, a public surface that stays (docs/architecture.md): ``from evals
import interactive``, ``from evals.interactive import page`` and ``evals.interactive.open_session`` keep working.
The calls live in one room with the ``Workbench`` object and its widgets, ``evals/workbench/``: ``calls`` is the
facade the page and the object share (issue 83, item 22); this door holds no code of its own."""
import sys

from evals.workbench import calls as _calls

MODULES = ("answering", "datasets", "drilldown", "evaluate", "generating", "grading", "index_sweep", "page",
           "session", "sweeps")

# every name of the facade, and each of the room's modules by its old path (``evals.interactive.page``)
globals().update({k: v for k, v in vars(_calls).items() if not k.startswith("__")})
for _name in MODULES:
    _mod = __import__(f"evals.workbench.{_name}", fromlist=["_"])
    globals()[_name] = _mod
    sys.modules[f"{__name__}.{_name}"] = _mod
