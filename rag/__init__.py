"""RAG Workbench: corpora, chunking, index, strategies, prompts and answers."""
import os as _os

# lance logs a WARN for every table it creates; keep the CLI output readable.
# (LANCE_LOG for pylance, LANCEDB_LOG for lancedb's bundled engine; Ray workers inherit both)
_os.environ.setdefault("LANCE_LOG", "error")
_os.environ.setdefault("LANCEDB_LOG", "error")
_os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

__version__ = "0.1.0"
