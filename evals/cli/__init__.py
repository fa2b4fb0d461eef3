"""``ragwb``, the command line: ``main`` and ``build_parser`` (``evals/cli/main.py``); one module per
command group (``ingest``, ``run``, ``results``, ``report``, ``route``, ``catalog``, ``agreement``, ``gate``,
``bench``) with the shared option groups in ``common``."""
from .main import build_parser, main  # noqa: F401
