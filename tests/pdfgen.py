"""Build real PDF files in tests (no PDF library needed to write them): evals/bench/pdfs.py, which the benches
use too. One Helvetica text page per list of lines, or a blank page for an empty list."""
from evals.bench.pdfs import make_heavy_pdf, make_pdf  # noqa: F401
