"""``python -m evals.cli``: the same as ``ragwb``."""
import sys

from .main import main

sys.exit(main())
